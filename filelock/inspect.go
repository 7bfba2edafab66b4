//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/dlockgo/dlock/driver"
)

// Inspect implements driver.Inspector: it lists the held locks of the
// driver's directory whose names start with prefix, with each file's token
// and, on Linux, the holder's process as Owner ("pid 1234"; the owner
// value itself for this Driver's locks). Expires is zero and Waiters -1
// (unknown). Off Linux, a TryLock racing with Inspect's non-blocking test
// lock can fail as if held. See docs/CLI.md, dlock status.
func (d *Driver) Inspect(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	if d.isClosed() {
		return nil, driver.ErrClosed
	}
	entries, err := os.ReadDir(d.dir)
	if err != nil {
		return nil, fmt.Errorf("filelock: inspect: %w", err)
	}
	holders, fromProc := procLocks()
	mine := d.ownersByName()
	var out []driver.LockInfo
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		name, ok := LockName(e.Name())
		if !ok || !strings.HasPrefix(name, prefix) || !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(d.dir, e.Name())
		id, err := pathID(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("filelock: inspect: %w", err)
		}
		info := driver.LockInfo{Name: name, Mode: driver.Exclusive, Waiters: -1}
		if fromProc {
			pid, held := holders.holder(id)
			if !held {
				continue
			}
			if pid > 0 {
				info.Owner = "pid " + strconv.Itoa(pid)
			}
		} else if held, err := probe(path); err != nil {
			return nil, fmt.Errorf("filelock: inspect %q: %w", name, err)
		} else if !held {
			continue
		}
		if o, ok := mine[name]; ok {
			info.Owner = o
		}
		if b, err := os.ReadFile(path); err == nil {
			info.Token, _ = parseToken(b)
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b driver.LockInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// ownersByName returns the owner values of the locks this driver holds.
func (d *Driver) ownersByName() map[string]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := make(map[string]string, len(d.held))
	for owner, h := range d.held {
		m[h.name] = owner
	}
	return m
}

// flockHolders maps files to their flock holders' pids, from /proc/locks.
type flockHolders struct {
	byDevIno map[[3]uint64]int // {major, minor, inode} → pid
	byIno    map[uint64][]int  // inode → pids, for file systems whose st_dev differs from the kernel's
	devs     map[[2]uint64]bool
}

// holder reports whether file id is flocked, and by which pid (0: unknown).
func (h flockHolders) holder(id fileID) (int, bool) {
	if pid, ok := h.byDevIno[[3]uint64{devMajor(id.dev), devMinor(id.dev), id.ino}]; ok {
		return pid, true
	}
	// Btrfs subvolumes report a st_dev /proc/locks never names: then an
	// unambiguous inode number decides.
	if h.devs[[2]uint64{devMajor(id.dev), devMinor(id.dev)}] {
		return 0, false
	}
	if pids := h.byIno[id.ino]; len(pids) == 1 {
		return pids[0], true
	}
	return 0, false
}

// procLocks reads /proc/locks' granted flocks; false without /proc or Linux.
func procLocks() (flockHolders, bool) {
	if runtime.GOOS != "linux" {
		return flockHolders{}, false
	}
	f, err := os.Open("/proc/locks")
	if err != nil {
		return flockHolders{}, false
	}
	defer f.Close()
	h := flockHolders{byDevIno: map[[3]uint64]int{}, byIno: map[uint64][]int{}, devs: map[[2]uint64]bool{}}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "12: FLOCK  ADVISORY  WRITE 4242 fe:00:9986097 0 EOF"; waiters
		// blocked in flock(2) have "->" after the id and are skipped.
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] != "FLOCK" {
			continue
		}
		pid, err := strconv.Atoi(fields[4])
		if err != nil {
			continue
		}
		parts := strings.Split(fields[5], ":")
		if len(parts) != 3 {
			continue
		}
		maj, err1 := strconv.ParseUint(parts[0], 16, 32)
		minor, err2 := strconv.ParseUint(parts[1], 16, 32)
		ino, err3 := strconv.ParseUint(parts[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		h.byDevIno[[3]uint64{maj, minor, ino}] = pid
		h.byIno[ino] = append(h.byIno[ino], pid)
		h.devs[[2]uint64{maj, minor}] = true
	}
	if sc.Err() != nil {
		return flockHolders{}, false
	}
	return h, true
}

// devMajor and devMinor split a stat st_dev as Linux encodes it.
func devMajor(dev uint64) uint64 { return (dev>>8)&0xfff | (dev>>32)&^0xfff }
func devMinor(dev uint64) uint64 { return dev&0xff | (dev>>12)&^0xff }

// probe tells whether path's file is flocked by trying a shared flock on
// a descriptor of its own, dropped at once.
func probe(path string) (bool, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if err == syscall.ENOENT {
			return false, nil
		}
		return false, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer closeFD(fd)
	free, err := tryFlock(fd, true)
	if free {
		funlock(fd)
	}
	return !free && err == nil, err
}

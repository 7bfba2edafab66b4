package filelock

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// Diagnose implements driver.Diagnoser: the lock directory's file system
// (from /proc/self/mountinfo; network file systems, where flock may be
// local to each client and inotify sees no other host, warn or fail) and
// whether this user may create lock files there (a temporary file of its
// own, removed at once). A local directory has no round trip nor clock of
// its own to check.
func (d *Driver) Diagnose(ctx context.Context, ttl time.Duration) ([]driver.Finding, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(d.dir); err != nil {
		return nil, fmt.Errorf("filelock: %w", err)
	}
	return []driver.Finding{fileSystem(d.dir), writable(d.dir)}, nil
}

// fileSystem judges the file system dir is on.
func fileSystem(dir string) driver.Finding {
	const doc = "docs/FILE.md#limits"
	f := driver.Finding{Check: "file system", Doc: doc}
	fstype, point, opts, err := mountOf(dir)
	if err != nil {
		f.Severity, f.Found = driver.Warn, "cannot tell: "+err.Error()
		f.Why = "On a network file system flock may hold on one client only, so processes on two hosts could both hold a lock"
		f.Fix = "Keep the lock directory on a local file system (or use a server backend across hosts)"
		return f
	}
	f.Found = fmt.Sprintf("%s at %s", fstype, point)
	switch {
	case fstype == "nfs" || fstype == "nfs4":
		f.Found += " (" + opts + ")"
		f.Severity = driver.Warn
		f.Why = "Clients on other hosts are excluded only through NFS byte-range locks, and inotify does not see them: their releases are noticed at the backstop only"
		f.Fix = "Mount without local_lock (local_lock=none), or use a server backend across hosts"
		if strings.Contains(opts, "local_lock=all") || strings.Contains(opts, "local_lock=flock") {
			f.Severity = driver.Fail
			f.Why = "Mounted with local_lock, flock holds on this client only: a process on another host takes the same lock"
		}
	case strings.HasPrefix(fstype, "cifs") || strings.HasPrefix(fstype, "smb") || fstype == "9p" ||
		fstype == "ceph" || fstype == "afs" || fstype == "glusterfs" || strings.HasPrefix(fstype, "fuse."):
		f.Severity = driver.Warn
		f.Why = "On this file system flock may hold on one client only, and inotify does not see other hosts: two hosts could both hold a lock"
		f.Fix = "Keep the lock directory on a local file system, or use a server backend across hosts"
	}
	return f
}

// writable reports whether this user may create files in dir.
func writable(dir string) driver.Finding {
	f := driver.Finding{Check: "permissions", Doc: "docs/FILE.md#files-and-names"}
	tmp, err := os.CreateTemp(dir, ".dlock-doctor-*")
	if err != nil {
		f.Severity, f.Found = driver.Fail, "cannot create a file: "+err.Error()
		f.Why = "Every acquisition creates or opens its lock file there: each one fails"
		f.Fix = "Give this user write access to " + dir + ", or choose another directory"
		return f
	}
	name := tmp.Name()
	_ = tmp.Close()
	_ = os.Remove(name)
	f.Found = "this user may create lock files in " + dir
	if st, err := os.Stat(dir); err == nil && st.Mode().Perm()&0o002 != 0 && st.Mode()&os.ModeSticky == 0 {
		f.Severity = driver.Warn
		f.Found = fmt.Sprintf("%s is writable by everyone, without the sticky bit (%v)", dir, st.Mode())
		f.Why = "Any user may remove a held lock's file: a second process gets the lock until the holder's next renewal notices"
		f.Fix = "chmod o-w or +t " + dir
	}
	return f
}

// mountOf returns the file system type, mount point and options of the
// mount that holds dir, from /proc/self/mountinfo.
func mountOf(dir string) (fstype, point, opts string, err error) {
	dir, err = filepath.EvalSymlinks(dir)
	if err != nil {
		return "", "", "", err
	}
	fh, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", "", err
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		// id parent major:minor root point options [optional...] - type source super-options
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, rest := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 6 || len(rest) < 3 {
			continue
		}
		p := strings.ReplaceAll(fields[4], `\040`, " ")
		if (dir == p || strings.HasPrefix(dir, strings.TrimSuffix(p, "/")+"/")) && len(p) >= len(point) {
			fstype, point, opts = rest[0], p, rest[2]
		}
	}
	if err := sc.Err(); err != nil {
		return "", "", "", err
	}
	if point == "" {
		return "", "", "", fmt.Errorf("no mount holds %s", dir)
	}
	return fstype, point, opts, nil
}

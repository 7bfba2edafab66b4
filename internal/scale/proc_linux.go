package scale

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ClockTicks is the unit of /proc/<pid>/stat's CPU times (USER_HZ), 100
// on every Linux architecture Go runs on.
const ClockTicks = 100

// procs are the server processes of a target: each listening address's
// process and its descendants (PostgreSQL's backends), found once.
type procs struct {
	roots []int
}

func newProcs(addrs []string) *procs {
	inodes := listeningInodes(addrs)
	if len(inodes) == 0 {
		return &procs{}
	}
	return &procs{roots: pidsOf(inodes)}
}

// tree returns the roots and all their descendants.
func (p *procs) tree() []int {
	if len(p.roots) == 0 {
		return nil
	}
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, f, _ := ProcStat(pid); len(f) > 2 {
			ppid, _ := strconv.Atoi(f[1])
			children[ppid] = append(children[ppid], pid)
		}
	}
	var out []int
	var walk func(int)
	walk = func(pid int) {
		out = append(out, pid)
		for _, c := range children[pid] {
			walk(c)
		}
	}
	for _, r := range p.roots {
		walk(r)
	}
	return out
}

// cpu returns the CPU time (user and system, with that of reaped
// children) the servers used so far; false when there are none.
func (p *procs) cpu() (time.Duration, bool) {
	pids := p.tree()
	if len(pids) == 0 {
		return 0, false
	}
	var ticks int64
	for _, pid := range pids {
		_, f, _ := ProcStat(pid)
		if len(f) < 15 {
			continue
		}
		// After "pid (comm)": state is f[0], utime f[11], stime f[12],
		// cutime f[13], cstime f[14].
		for _, i := range []int{11, 12, 13, 14} {
			v, _ := strconv.ParseInt(f[i], 10, 64)
			ticks += v
		}
	}
	return time.Duration(ticks) * time.Second / ClockTicks, true
}

// memory returns the servers' proportional set size in bytes (shared
// pages split among the processes that map them); false if there are none.
func (p *procs) memory() (int64, bool) {
	pids := p.tree()
	if len(pids) == 0 {
		return 0, false
	}
	var total int64
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
		if err != nil {
			continue
		}
		for l := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Pss:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				total += kb * 1024
				break
			}
		}
	}
	return total, true
}

// ProcStat reads /proc/<pid>/stat: the command name, which may hold
// spaces and parentheses and so ends at the last ')', and the fields after
// it (the state first, utime and stime 12th and 13th).
func ProcStat(pid int) (comm string, fields []string, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", nil, err
	}
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return "", nil, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	return string(b[open+1 : end]), strings.Fields(string(b[end+1:])), nil
}

// listeningInodes returns the socket inodes listening on the loopback
// ones of addrs (only this machine's processes can be read).
func listeningInodes(addrs []string) map[string]bool {
	ports := map[int]bool{}
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			continue
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			continue
		}
		n, err := strconv.Atoi(port)
		if err == nil {
			ports[n] = true
		}
	}
	inodes := map[string]bool{}
	if len(ports) == 0 {
		return inodes
	}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			// sl local_address rem_address st ... inode (field 9)
			if len(fs) < 10 || fs[3] != "0A" { // 0A: LISTEN
				continue
			}
			_, hexPort, ok := strings.Cut(fs[1], ":")
			if !ok {
				continue
			}
			port, err := strconv.ParseInt(hexPort, 16, 32)
			if err == nil && ports[int(port)] {
				inodes["socket:["+fs[9]+"]"] = true
			}
		}
		fh.Close()
	}
	return inodes
}

// pidsOf returns the processes holding any of the socket inodes, each once.
func pidsOf(inodes map[string]bool) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fds, _ := filepath.Glob("/proc/" + e.Name() + "/fd/*")
		for _, fd := range fds {
			if l, err := os.Readlink(fd); err == nil && inodes[l] {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// SelfCPU returns the CPU time (user+system) this process used so far.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

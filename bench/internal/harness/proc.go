package harness

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ClockTicks is the unit of the CPU times in /proc/<pid>/stat: USER_HZ,
// sysconf(_SC_CLK_TCK), which is 100 on Linux.
const ClockTicks = 100

// ProcStat reads /proc/<pid>/stat: the command name and the CPU time the
// process used so far (user+system, all its threads), in clock ticks.
func ProcStat(pid int) (comm string, ticks uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, err
	}
	// pid (comm) state ppid ... utime(14) stime(15); comm may hold spaces
	// and parentheses, so it ends at the last ')'.
	line := string(b)
	open, end := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if open < 0 || end < open {
		return "", 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(line[end+1:])
	if len(f) < 13 {
		return "", 0, fmt.Errorf("/proc/%d/stat: %d fields after the command name", pid, len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return line[open+1 : end], ut + st, nil
}

// ProcessCPU returns the CPU time (user+system, all threads) the process
// pid used so far, to 1/ClockTicks of a second.
func ProcessCPU(pid int) (time.Duration, error) {
	_, t, err := ProcStat(pid)
	return time.Duration(t) * time.Second / ClockTicks, err
}

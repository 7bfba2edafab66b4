package harness

import (
	"fmt"
	"strconv"
	"time"

	"github.com/dlockgo/dlock/internal/scale"
)

// ProcStat reads /proc/<pid>/stat: the command name and the CPU time the
// process used so far (user+system, all its threads), in clock ticks
// (scale.ClockTicks).
func ProcStat(pid int) (comm string, ticks uint64, err error) {
	comm, f, err := scale.ProcStat(pid)
	if err != nil {
		return "", 0, err
	}
	if len(f) < 13 {
		return "", 0, fmt.Errorf("/proc/%d/stat: %d fields after the command name", pid, len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return comm, ut + st, nil
}

// ProcessCPU returns the CPU time (user+system, all threads) the process
// pid used so far, to 1/scale.ClockTicks of a second.
func ProcessCPU(pid int) (time.Duration, error) {
	_, t, err := ProcStat(pid)
	return time.Duration(t) * time.Second / scale.ClockTicks, err
}

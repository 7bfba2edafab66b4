package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/dlockgo/dlock/bench/internal/harness"
	"github.com/dlockgo/dlock/internal/scale"
)

// cpuSnapshot is the CPU time (clock ticks) used so far by every process
// other than this one, its servers and the shared Redis, by pid: the
// load other programs put on the machine during a measurement.
type cpuSnapshot struct {
	at    time.Time
	ticks map[int]uint64
}

func snapshotForeign(exclude map[int]bool, sharedPort string) cpuSnapshot {
	s := cpuSnapshot{at: time.Now(), ticks: map[int]uint64{}}
	self := os.Getpid()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || pid == self || exclude[pid] {
			continue
		}
		comm, ticks, err := harness.ProcStat(pid)
		if err != nil {
			continue
		}
		if comm == "redis-server" {
			// The shared server works for this benchmark too (and for
			// others, which cannot be told apart): not counted.
			if cmd, err := os.ReadFile(d + "/cmdline"); err == nil && strings.Contains(string(cmd), ":"+sharedPort) {
				continue
			}
		}
		s.ticks[pid] = ticks
	}
	return s
}

// foreignCPU returns the CPU used by other processes between a and b, as
// a share of one CPU (1.0 = one CPU fully busy).
func foreignCPU(a, b cpuSnapshot) float64 {
	var sum uint64
	for pid, t := range b.ticks {
		if t0, ok := a.ticks[pid]; ok {
			if t > t0 {
				sum += t - t0
			}
		} else {
			sum += t // started during the window
		}
	}
	sec := b.at.Sub(a.at).Seconds()
	if sec <= 0 {
		return 0
	}
	return float64(sum) / scale.ClockTicks / sec
}

// waitQuiet waits until other processes used at most limit CPU over half
// a second, or until max has passed.
func waitQuiet(exclude map[int]bool, sharedPort string, limit float64, max time.Duration) {
	deadline := time.Now().Add(max)
	for {
		a := snapshotForeign(exclude, sharedPort)
		time.Sleep(500 * time.Millisecond)
		f := foreignCPU(a, snapshotForeign(exclude, sharedPort))
		if f <= limit {
			return
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "machine still busy (other processes %.2f CPU); measuring anyway\n", f)
			return
		}
	}
}

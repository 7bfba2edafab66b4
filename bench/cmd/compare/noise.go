package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cpuSnapshot is the CPU time (clock ticks) used so far by every process
// other than this one, its redis-servers and the shared Redis, by pid: the
// load other programs put on the machine during a measurement.
type cpuSnapshot struct {
	at    time.Time
	ticks map[int]uint64
}

const clockTicks = 100 // USER_HZ on Linux

func snapshotForeign(exclude map[int]bool, sharedPort string) cpuSnapshot {
	s := cpuSnapshot{at: time.Now(), ticks: map[int]uint64{}}
	self := os.Getpid()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || pid == self || exclude[pid] {
			continue
		}
		b, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime(14) stime(15)
		line := string(b)
		open, close := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
		if open < 0 || close < open {
			continue
		}
		if line[open+1:close] == "redis-server" {
			// The shared server works for this benchmark too (and for
			// others, which cannot be told apart): not counted.
			if cmd, err := os.ReadFile(d + "/cmdline"); err == nil && strings.Contains(string(cmd), ":"+sharedPort) {
				continue
			}
		}
		f := strings.Fields(line[close+1:])
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseUint(f[11], 10, 64)
		st, _ := strconv.ParseUint(f[12], 10, 64)
		s.ticks[pid] = ut + st
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
	return float64(sum) / clockTicks / sec
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

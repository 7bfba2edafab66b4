//go:build !linux

package scale

import "time"

// procs reads server processes on Linux only; elsewhere there are none.
type procs struct{}

func newProcs([]string) *procs            { return &procs{} }
func (*procs) cpu() (time.Duration, bool) { return 0, false }
func (*procs) memory() (int64, bool)      { return 0, false }

// SelfCPU returns the CPU time this process used so far: 0, unread, off Linux.
func SelfCPU() time.Duration { return 0 }

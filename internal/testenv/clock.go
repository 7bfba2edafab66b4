package testenv

import (
	_ "embed"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

//go:embed clockshim/clockshim.c
var clockShimSource []byte

// clockShim builds the clock shim (clockshim/clockshim.c) once per test
// binary and returns the shared library's path.
func clockShim(t testing.TB) string {
	t.Helper()
	path, err := buildClockShim()
	if err != nil {
		t.Fatalf("build the clock shim (needs gcc; %s installs it): %v", ServicesScript, err)
	}
	return path
}

var buildClockShim = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "dlock-clockshim-")
	if err != nil {
		return "", err
	}
	src := filepath.Join(dir, "clockshim.c")
	if err := os.WriteFile(src, clockShimSource, 0o644); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "clockshim.so")
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-O2", "-o", path, src).CombinedOutput(); err != nil {
		return "", fmt.Errorf("gcc: %v: %s", err, out)
	}
	return path, nil
})

// FakeClock is the wall clock of the processes started with its Env: a
// process's CLOCK_REALTIME, gettimeofday and time, shifted by a rule the
// test changes while they run (Jump, SetRate). Their monotonic clocks
// are left alone. It works for programs that read the clock through libc
// (redis-server, the JVM), not for Go programs, which read it without
// libc.
type FakeClock struct {
	t    testing.TB
	path string
	mem  []byte
	mu   sync.Mutex
}

// rule is the shim's struct rule, each field a 64-bit word the atomics
// read and write: seq, base and offset (int64 ns), rate (a double's bits).
type rule struct{ seq, base, offset, rate atomic.Uint64 }

// NewFakeClock makes a fake clock, at first the real one.
func NewFakeClock(t testing.TB) *FakeClock {
	t.Helper()
	clockShim(t) // fail now, not at the first start
	path := filepath.Join(t.TempDir(), "clock")
	must(t, os.WriteFile(path, make([]byte, unsafe.Sizeof(rule{})), 0o644))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, int(unsafe.Sizeof(rule{})), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("map the fake clock's rule: %v", err)
	}
	c := &FakeClock{t: t, path: path, mem: mem}
	t.Cleanup(func() { _ = unix.Munmap(mem) })
	c.set(0, 0, 1)
	return c
}

// Env is what a process needs in its environment to run on the clock.
func (c *FakeClock) Env() []string {
	return []string{"LD_PRELOAD=" + clockShim(c.t), "DLOCK_CLOCK_FILE=" + c.path}
}

// rule returns the rule in the mapped file.
func (c *FakeClock) rule() *rule { return (*rule)(unsafe.Pointer(&c.mem[0])) }

// set writes a rule under the seqlock. The caller holds c.mu or is
// NewFakeClock.
func (c *FakeClock) set(base, offset int64, rate float64) {
	r := c.rule()
	r.seq.Add(1) // odd: a write in progress
	r.base.Store(uint64(base))
	r.offset.Store(uint64(offset))
	r.rate.Store(math.Float64bits(rate))
	r.seq.Add(1)
}

// now returns the rule in force and the fake time at real time now.
func (c *FakeClock) now(now int64) (fake int64, rate float64) {
	r := c.rule()
	base, offset := int64(r.base.Load()), int64(r.offset.Load())
	rate = math.Float64frombits(r.rate.Load())
	return now + offset + int64(float64(now-base)*(rate-1)), rate
}

// Jump moves the clock by d (forward when positive) at once, keeping its
// rate.
func (c *FakeClock) Jump(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now().UnixNano()
	fake, rate := c.now(now)
	c.set(now, fake+int64(d)-now, rate)
}

// SetRate makes the clock run rate times as fast as the real one from
// now on (1: the real rate), without a jump.
func (c *FakeClock) SetRate(rate float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now().UnixNano()
	fake, _ := c.now(now)
	c.set(now, fake-now, rate)
}

// Reset puts the clock back to the real time and rate: a jump back if it
// ran ahead.
func (c *FakeClock) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.set(0, 0, 1)
}

// Offset returns how far the clock is ahead of the real one now.
func (c *FakeClock) Offset() time.Duration {
	now := time.Now().UnixNano()
	fake, _ := c.now(now)
	return time.Duration(fake - now)
}

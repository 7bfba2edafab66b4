package zklock_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/zklock"
)

// owner returns the owner value number i, 32 hex digits as dlock's are.
func owner(i int) string { return fmt.Sprintf("%032x", i+1) }

// TestCheckEveryKind: every kind of lock the driver grants carries a
// Check, nil while the session is valid, that costs no allocation.
func TestCheckEveryKind(t *testing.T) {
	ctx := locktest.Context(t, 30*time.Second)
	d := newDriver(t, []string{testenv.ZKAddr(t)}, testPrefix(), 2*time.Second)
	for i, r := range []driver.Request{
		{Name: "mutex", Mode: driver.Exclusive},
		{Name: "rw", Mode: driver.Read},
		{Name: "rw2", Mode: driver.Write},
		{Name: "sem", Mode: driver.Permit, Limit: 2},
		{Name: "elect", Mode: driver.Leader, Value: "me"},
	} {
		r.Owner = owner(i)
		g, err := d.Lock(ctx, r)
		if err != nil {
			t.Fatalf("%v lock: %v", r.Mode, err)
		}
		if g.Check == nil {
			t.Errorf("%v grant has no Check", r.Mode)
			continue
		}
		if err := g.Check(time.Now()); err != nil {
			t.Errorf("%v grant's Check right after the grant: %v", r.Mode, err)
		}
		if a := testing.AllocsPerRun(1000, func() { _ = g.Check(time.Now()) }); a != 0 {
			t.Errorf("%v grant's Check allocates %v times per call", r.Mode, a)
		}
	}
}

// TestCheckAtDeadline: Check turns non-nil at the session's validity's
// end, decided at the call (no goroutine runs between the calls), stays
// so, and ends the session: the lock's loss is signalled at once.
func TestCheckAtDeadline(t *testing.T) {
	ctx := locktest.Context(t, 30*time.Second)
	const timeout = 2 * time.Second
	d := newDriver(t, []string{testenv.ZKAddr(t)}, testPrefix(), timeout)
	g, err := d.Lock(ctx, driver.Request{Name: "deadline", Owner: owner(1)})
	if err != nil {
		t.Fatal(err)
	}
	lost := locktest.LostCh(g)
	now := time.Now()
	v := d.ValidUntil()
	if left := v.Sub(now); left <= 0 || left > timeout*9/10 {
		t.Fatalf("validity ends %v from now; want within (0, 0.9 × %v]", left, timeout)
	}
	// A sync reply may move the validity on between the calls: look again
	// until it stood still across the Check at its end.
	for {
		if err := g.Check(v.Add(-time.Nanosecond)); err != nil {
			t.Fatalf("Check just before the validity's end: %v", err)
		}
		err := g.Check(v)
		if v2 := d.ValidUntil(); v2 != v {
			if err != nil {
				t.Fatalf("Check(%v) = %v although the validity ends at %v", v, err, v2)
			}
			v = v2
			continue
		}
		if !errors.Is(err, zklock.ErrNoContact) {
			t.Fatalf("Check at the validity's end = %v, want an error matching the no-contact cause", err)
		}
		break
	}
	if err := g.Check(time.Now()); err == nil {
		t.Error("Check went back to nil after reporting the validity over")
	}
	select {
	case <-lost:
	default:
		t.Error("loss not signalled after Check found the validity over")
	}
}

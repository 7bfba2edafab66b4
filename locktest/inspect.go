package locktest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

// inspectListsHolders: a driver that is a driver.Inspector lists, to
// another client, exactly the locks held under a prefix (a plain string
// prefix of the names), sorted by name, with the holder's token when it
// reports one, an expiry within the TTL's reach when it reports one, and
// no waiters; released locks drop out of the list. Listing other kinds is
// optional, but two readers of a readers-writer lock, if listed, are two
// entries in read mode. A driver without Inspect passes.
func (s *suite) inspectListsHolders(t *testing.T, ctx context.Context, base string) {
	l := s.locker(t)
	other := s.locker(t)
	insp, ok := other.Driver().(driver.Inspector)
	if !ok {
		t.Logf("%T is not a driver.Inspector: nothing to check", other.Driver())
		return
	}
	a, ab, c := base+"/a", base+"/a/b", base+"/c"
	leases := map[string]*dlock.Lease{}
	for _, n := range []string{a, ab, c} {
		leases[n] = acquire(t, ctx, l, n)
	}
	check := func(when, prefix string, want ...string) {
		t.Helper()
		got, err := insp.Inspect(ctx, prefix)
		if err != nil {
			t.Fatalf("%s: Inspect(%q): %v", when, prefix, err)
		}
		var names []string
		for _, info := range got {
			names = append(names, info.Name)
		}
		if !slices.Equal(names, want) {
			t.Errorf("%s: Inspect(%q) names = %q, want %q", when, prefix, names, want)
			return
		}
		now := time.Now()
		for _, info := range got {
			lease := leases[info.Name]
			if info.Mode != driver.Exclusive {
				t.Errorf("%s: %s: mode %v, want exclusive", when, info.Name, info.Mode)
			}
			if info.Token != 0 && info.Token != lease.Token() {
				t.Errorf("%s: %s: token %d, the holder's is %d", when, info.Name, info.Token, lease.Token())
			}
			if !info.Expires.IsZero() && (info.Expires.Before(now.Add(-time.Second)) || info.Expires.After(now.Add(2*s.h.TTL+5*time.Second))) {
				t.Errorf("%s: %s: expires %v from now, TTL %v", when, info.Name, info.Expires.Sub(now), s.h.TTL)
			}
			if info.Waiters > 0 {
				t.Errorf("%s: %s: %d waiters, none wait", when, info.Name, info.Waiters)
			}
		}
	}
	check("three held", base+"/", a, ab, c)
	check("three held", a, a, ab)
	check("three held", a+"/", ab)
	check("three held", base+"/zz")
	release(t, ctx, leases[a])
	check("one released", base+"/", ab, c)
	release(t, ctx, leases[ab])
	release(t, ctx, leases[c])
	check("all released", base+"/")

	// Listing other kinds is optional, but a backend that lists a
	// readers-writer lock held by two readers shows each, in read mode.
	if !l.Supports(driver.Read) {
		return
	}
	rw := base + "/rw"
	r1 := mustAcquire(t, func() (*dlock.Lease, error) { return l.AcquireRead(ctx, rw) }, "AcquireRead")
	r2 := mustAcquire(t, func() (*dlock.Lease, error) { return l.AcquireRead(ctx, rw) }, "AcquireRead")
	got, err := insp.Inspect(ctx, rw)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", rw, err)
	}
	if len(got) > 0 {
		if len(got) != 2 {
			t.Errorf("two readers: Inspect(%q) = %+v, want both or none", rw, got)
		}
		tokens := map[uint64]bool{r1.Token(): true, r2.Token(): true}
		for _, info := range got {
			if info.Name != rw || info.Mode != driver.Read || info.Token != 0 && !tokens[info.Token] {
				t.Errorf("two readers: entry %+v, want %s in read mode with a reader's token (%d or %d)",
					info, rw, r1.Token(), r2.Token())
			}
		}
	} else {
		t.Logf("%T does not list readers-writer locks", other.Driver())
	}
	release(t, ctx, r1)
	release(t, ctx, r2)
	check("readers released", rw)
}

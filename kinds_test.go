package dlock_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/memlock"
)

// plainDriver has the methods of driver.Driver and driver.Waiter only,
// and counts the requests that reach it.
type plainDriver struct {
	d     *memlock.Driver
	calls atomic.Int32
}

func (p *plainDriver) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	p.calls.Add(1)
	return p.d.TryLock(ctx, r)
}

func (p *plainDriver) Lock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	p.calls.Add(1)
	return p.d.Lock(ctx, r)
}

func (p *plainDriver) Renew(ctx context.Context, r driver.Request) (time.Time, error) {
	return p.d.Renew(ctx, r)
}

func (p *plainDriver) Unlock(ctx context.Context, r driver.Request) error { return p.d.Unlock(ctx, r) }

func (p *plainDriver) Close() error { return p.d.Close() }

// moderOnly supports every mode but is no Elector.
type moderOnly struct{ *plainDriver }

func (moderOnly) Supports(driver.Mode) bool { return true }

func TestUnsupportedKinds(t *testing.T) {
	ctx := context.Background()
	p := &plainDriver{d: memlock.NewStore().Driver()}
	l := newLocker(t, p)
	if !l.Supports(driver.Exclusive) {
		t.Error("Supports(Exclusive) = false")
	}
	for _, m := range []driver.Mode{driver.Read, driver.Write, driver.Permit, driver.Leader} {
		if l.Supports(m) {
			t.Errorf("Supports(%v) = true for a driver that is no Moder", m)
		}
	}
	attempts := map[string]func() error{
		"AcquireRead":      func() error { _, err := l.AcquireRead(ctx, "x"); return err },
		"TryAcquireRead":   func() error { _, err := l.TryAcquireRead(ctx, "x"); return err },
		"AcquireWrite":     func() error { _, err := l.AcquireWrite(ctx, "x"); return err },
		"TryAcquireWrite":  func() error { _, err := l.TryAcquireWrite(ctx, "x"); return err },
		"AcquirePermit":    func() error { _, err := l.AcquirePermit(ctx, "x", 2); return err },
		"TryAcquirePermit": func() error { _, err := l.TryAcquirePermit(ctx, "x", 2); return err },
		"Campaign":         func() error { _, err := l.Campaign(ctx, "x", "me"); return err },
		"TryCampaign":      func() error { _, err := l.TryCampaign(ctx, "x", "me"); return err },
		"Leader":           func() error { _, err := l.Leader(ctx, "x"); return err },
		"Observe":          func() error { _, err := l.Observe(ctx, "x"); return err },
	}
	for name, attempt := range attempts {
		if err := attempt(); !errors.Is(err, dlock.ErrUnsupported) {
			t.Errorf("%s on a mutex-only backend = %v, want ErrUnsupported", name, err)
		}
	}
	if n := p.calls.Load(); n != 0 {
		t.Errorf("the driver got %d requests for kinds it does not support", n)
	}

	// A Moder that is no Elector has no elections.
	l2 := newLocker(t, moderOnly{&plainDriver{d: memlock.NewStore().Driver()}})
	if l2.Supports(driver.Leader) || !l2.Supports(driver.Permit) {
		t.Error("a Moder without Elector: want Permit supported and Leader not")
	}
	if _, err := l2.Campaign(ctx, "x", "me"); !errors.Is(err, dlock.ErrUnsupported) {
		t.Errorf("Campaign without an Elector = %v, want ErrUnsupported", err)
	}
	if _, err := l2.TryCampaign(ctx, "x", "me"); !errors.Is(err, dlock.ErrUnsupported) {
		t.Errorf("TryCampaign without an Elector = %v, want ErrUnsupported", err)
	}
}

func TestKindsOnMemlock(t *testing.T) {
	ctx := context.Background()
	store := memlock.NewStore()
	a, b := newMem(t, store), newMem(t, store)
	for _, m := range []driver.Mode{driver.Exclusive, driver.Read, driver.Write, driver.Permit, driver.Leader} {
		if !a.Supports(m) {
			t.Errorf("memlock: Supports(%v) = false", m)
		}
	}
	for _, limit := range []int{0, -1} {
		if _, err := a.AcquirePermit(ctx, "s", limit); err == nil {
			t.Errorf("AcquirePermit with limit %d succeeded", limit)
		}
		if _, err := a.TryAcquirePermit(ctx, "s", limit); err == nil {
			t.Errorf("TryAcquirePermit with limit %d succeeded", limit)
		}
	}
	if _, err := a.AcquireRead(ctx, "bad//name"); !errors.Is(err, dlock.ErrInvalidName) {
		t.Errorf("AcquireRead of a bad name = %v, want ErrInvalidName", err)
	}
	if _, err := a.Leader(ctx, "bad//name"); !errors.Is(err, dlock.ErrInvalidName) {
		t.Errorf("Leader of a bad name = %v, want ErrInvalidName", err)
	}

	// The four kinds of "x" are four locks: all held at once.
	leases := []*dlock.Lease{}
	for _, take := range []func() (*dlock.Lease, error){
		func() (*dlock.Lease, error) { return a.TryAcquire(ctx, "x") },
		func() (*dlock.Lease, error) { return a.TryAcquireWrite(ctx, "x") },
		func() (*dlock.Lease, error) { return a.TryAcquirePermit(ctx, "x", 1) },
		func() (*dlock.Lease, error) { return a.Campaign(ctx, "x", "a") },
	} {
		lease, err := take()
		if err != nil {
			t.Fatalf("taking a kind of lock %q while the others are held: %v", "x", err)
		}
		leases = append(leases, lease)
	}
	for i, want := range []driver.Mode{driver.Exclusive, driver.Write, driver.Permit, driver.Leader} {
		if leases[i].Mode() != want {
			t.Errorf("lease %d: Mode() = %v, want %v", i, leases[i].Mode(), want)
		}
	}
	if info, err := b.Leader(ctx, "x"); err != nil || info.Value != "a" || info.Token != leases[3].Token() {
		t.Errorf("Leader() = %+v, %v; want a with token %d", info, err, leases[3].Token())
	}
	for _, lease := range leases {
		if err := lease.Release(ctx); err != nil {
			t.Error(err)
		}
	}

	// Observe's channel closes with its Locker.
	ch, err := b.Observe(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if info := <-ch; info != (dlock.LeaderInfo{}) {
		t.Errorf("first value observed with nobody leading = %+v, want zero", info)
	}
	_ = b.Close()
	select {
	case _, ok := <-ch:
		if ok {
			t.Error("Observe sent a value after its Locker closed, with no change")
		}
	case <-time.After(time.Second):
		t.Error("Observe's channel not closed after its Locker closed")
	}
	if _, err := b.Observe(ctx, "x"); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Observe after Close = %v, want ErrClosed", err)
	}
}

// TryCampaign takes a free election at once, fails with ErrNotAcquired
// while another candidate leads (without queueing: the leader's
// resignation leaves nobody leading), and checks names like Campaign.
func TestTryCampaignOnMemlock(t *testing.T) {
	ctx := context.Background()
	store := memlock.NewStore()
	a, b := newMem(t, store), newMem(t, store)
	if _, err := a.TryCampaign(ctx, "bad//name", "a"); !errors.Is(err, dlock.ErrInvalidName) {
		t.Errorf("TryCampaign of a bad name = %v, want ErrInvalidName", err)
	}
	lead, err := a.TryCampaign(ctx, "e", "a")
	if err != nil {
		t.Fatalf("TryCampaign of a free election: %v", err)
	}
	if lead.Mode() != driver.Leader {
		t.Errorf("Mode() = %v, want leader", lead.Mode())
	}
	if info, err := b.Leader(ctx, "e"); err != nil || info.Value != "a" || info.Token != lead.Token() {
		t.Errorf("Leader() = %+v, %v; want a with token %d", info, err, lead.Token())
	}
	if l, err := b.TryCampaign(ctx, "e", "b"); !errors.Is(err, dlock.ErrNotAcquired) {
		if err == nil {
			_ = l.Release(ctx)
		}
		t.Errorf("TryCampaign while another leads = %v, want ErrNotAcquired", err)
	}
	if err := lead.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := b.Leader(ctx, "e"); err != nil || info != (dlock.LeaderInfo{}) {
		t.Errorf("Leader() after the only leader resigned = %+v, %v; want nobody (a failed TryCampaign must not queue)", info, err)
	}
	next, err := b.TryCampaign(ctx, "e", "b")
	if err != nil {
		t.Fatalf("TryCampaign after the leader resigned: %v", err)
	}
	if next.Token() <= lead.Token() {
		t.Errorf("token %d after %d: want it greater", next.Token(), lead.Token())
	}
	_ = next.Release(ctx)
	_ = a.Close()
	if _, err := a.TryCampaign(ctx, "e", "a"); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("TryCampaign after Close = %v, want ErrClosed", err)
	}
}

// Every way to wait for a lock has a one-attempt Try form with the same
// signature, as the package documentation and README promise.
func TestEveryAcquireHasTryForm(t *testing.T) {
	typ := reflect.TypeFor[*dlock.Locker]()
	waits := 0
	for i := range typ.NumMethod() {
		m := typ.Method(i)
		if !strings.HasPrefix(m.Name, "Acquire") && m.Name != "Campaign" {
			continue
		}
		waits++
		try, ok := typ.MethodByName("Try" + m.Name)
		if !ok {
			t.Errorf("Locker.%s has no Try%s", m.Name, m.Name)
			continue
		}
		if try.Type != m.Type {
			t.Errorf("Locker.Try%s is %v, want the signature of %s, %v", m.Name, try.Type, m.Name, m.Type)
		}
	}
	if waits < 6 {
		t.Errorf("found %d waiting methods on Locker, want at least Acquire, AcquireRead, AcquireWrite, AcquirePermit, Campaign, AcquireAll", waits)
	}
}

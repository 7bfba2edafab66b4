package dlock_test

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/memlock"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func TestValidateName(t *testing.T) {
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"a", true},
		{"orders/42", true},
		{"A-b_c.d:e@f+g=h/x", true},
		{"..a", true},
		{strings.Repeat("n", dlock.MaxNameLen), true},
		{"", false},
		{strings.Repeat("n", dlock.MaxNameLen+1), false},
		{"/a", false},
		{"a/", false},
		{"a//b", false},
		{"..", false},
		{"a/../b", false},
		{"./a", false},
		{"a b", false},
		{"a{b}", false},
		{"a*", false},
		{"ünïcode", false},
		{"tab\t", false},
	} {
		err := dlock.ValidateName(c.name)
		if c.ok && err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", c.name, err)
		}
		if !c.ok && !errors.Is(err, dlock.ErrInvalidName) {
			t.Errorf("ValidateName(%q) = %v, want ErrInvalidName", c.name, err)
		}
	}
}

// BenchmarkValidateName: the check every acquisition makes of its name.
func BenchmarkValidateName(b *testing.B) {
	for _, c := range []struct{ kind, name string }{{"flat", "bench-s2-7"}, {"segments", "orders/2026/invoice-42:lock"}} {
		name := c.name
		b.Run(c.kind, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := dlock.ValidateName(name); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"a", "a/b", "../x", "a//b", "{x}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if dlock.ValidateName(name) != nil {
			return
		}
		// A valid name is safe on every store: no path tricks, no Redis hash
		// tag braces, nothing outside printable ASCII.
		if strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") || strings.Contains(name, "//") ||
			strings.ContainsAny(name, "{} \\\x00") || len(name) > dlock.MaxNameLen {
			t.Fatalf("ValidateName accepted %q", name)
		}
		for _, seg := range strings.Split(name, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("ValidateName accepted %q", name)
			}
		}
	})
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	_, err := dlock.Open(ctx, "nosuch://x")
	if err == nil || !strings.Contains(err.Error(), "mem") || !strings.Contains(err.Error(), `"nosuch"`) {
		t.Errorf("Open of an unknown scheme = %v, want an error naming it and listing the registered ones", err)
	}
	if _, err := dlock.Open(ctx, "no scheme"); err == nil {
		t.Error("Open without a scheme succeeded")
	}
	if _, err := dlock.Open(ctx, "mem://x", dlock.WithTTL(time.Millisecond)); err == nil {
		t.Error("Open with a TTL below MinTTL succeeded")
	}
}

func TestRegisterTwicePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("registering a scheme twice did not panic")
		}
	}()
	dlock.Register("mem", func(context.Context, driver.URL) (driver.Driver, error) { return nil, nil })
}

func TestCloseReleasesLeasesAndLeaksNoGoroutines(t *testing.T) {
	ctx := context.Background()
	before := runtime.NumGoroutine()
	store := memlock.NewStore()
	l, err := memlock.New(store)
	if err != nil {
		t.Fatal(err)
	}
	var leases []*dlock.Lease
	for _, n := range []string{"a", "b", "c"} {
		lease, err := l.Acquire(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		_, cancel := lease.Context(ctx)
		defer cancel()
		leases = append(leases, lease)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, lease := range leases {
		if !errors.Is(lease.Err(), dlock.ErrReleased) {
			t.Errorf("after Close, Err() = %v, want ErrReleased", lease.Err())
		}
	}
	if _, err := l.Acquire(ctx, "a"); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Acquire after Close = %v, want ErrClosed", err)
	}
	other, _ := memlock.New(store)
	defer other.Close()
	if lease, err := other.TryAcquire(ctx, "a"); err != nil {
		t.Errorf("the lock is still held after Close: %v", err)
	} else {
		_ = lease.Release(ctx)
	}
	locktest.NoLeak(t, before)
}

func TestMetricsAndLogs(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	var logs testenv.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	store := memlock.NewStore()
	l := newMem(t, store, dlock.WithMeterProvider(mp), dlock.WithLogger(logger), dlock.WithTTL(60*time.Millisecond))
	lease := mustAcquire(t, l, "job")
	if _, err := l.TryAcquire(ctx, "job"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // a renewal
	store.Revoke("job")
	<-lease.Done()

	seen := map[string]bool{}
	for _, m := range collect(t, reader) {
		seen[m.Name] = true
	}
	for _, name := range []string{"dlock.acquire.duration", "dlock.acquisitions", "dlock.renewals", "dlock.lost", "dlock.held", "dlock.hold.duration"} {
		if !seen[name] {
			t.Errorf("metric %s not recorded; have %v", name, seen)
		}
	}
	out := logs.String()
	for _, want := range []string{"dlock: acquired", "name=job", "backend=mem", "dlock: lease lost"} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %q:\n%s", want, out)
		}
	}
}

// collect returns the metrics reader holds, of every scope.
func collect(t *testing.T, reader *sdkmetric.ManualReader) []metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var ms []metricdata.Metrics
	for _, sm := range rm.ScopeMetrics {
		ms = append(ms, sm.Metrics...)
	}
	return ms
}

// signalling wraps a memlock driver; its grants of the lock called
// "backend" carry an OnLost the test signals, as a backend does when its
// session ends.
type signalling struct {
	*memlock.Driver
	lost driver.LossNotice
}

func (s *signalling) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	g, err := s.Driver.TryLock(ctx, r)
	if r.Name == "backend" {
		g.OnLost = s.lost.Set
	}
	return g, err
}

// dlock.lost counts each way of losing a lease under its own reason.
func TestLostReasons(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	store := memlock.NewStore()
	d := &signalling{Driver: store.Driver()}
	l := newLocker(t, d, dlock.WithMeterProvider(mp), dlock.WithTTL(200*time.Millisecond))

	// expired: no renewal, the validity runs out.
	a, err := l.TryAcquire(ctx, "expired", dlock.WithAutoRenew(false), dlock.WithTTL(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// gone: the store drops the lock, the next renewal finds it gone.
	b, err := l.TryAcquire(ctx, "gone", dlock.WithTTL(90*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	store.Revoke("gone")
	// backend: the driver signals the loss.
	c, err := l.TryAcquire(ctx, "backend")
	if err != nil {
		t.Fatal(err)
	}
	d.lost.Signal()
	// max_hold: renewed, but held for its WithMaxHold.
	m, err := l.TryAcquire(ctx, "max-hold", dlock.WithMaxHold(120*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// released: not counted as lost.
	r, err := l.TryAcquire(ctx, "released")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ls := range []*dlock.Lease{a, b, c, m} {
		select {
		case <-ls.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("lease %s not lost", ls.Name())
		}
	}

	got := map[string]int64{}
	for _, m := range collect(t, reader) {
		if m.Name != "dlock.lost" {
			continue
		}
		for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
			reason, _ := dp.Attributes.Value("reason")
			got[reason.AsString()] += dp.Value
		}
	}
	want := map[string]int64{"expired": 1, "gone": 1, "backend": 1, "max_hold": 1}
	if len(got) != len(want) || got["expired"] != 1 || got["gone"] != 1 || got["backend"] != 1 || got["max_hold"] != 1 {
		t.Errorf("dlock.lost by reason = %v, want %v", got, want)
	}
}

// TestValidateNameSaysWhichCharacter: the error shows the character as
// written, not one byte of its UTF-8 form, and says what a name may hold.
func TestValidateNameSaysWhichCharacter(t *testing.T) {
	for _, c := range []struct{ name, want string }{
		{"ключ", `'к' (U+043A) at byte 0`},
		{"job/é", `'é' (U+00E9) at byte 4`},
		{"a b", `' ' (U+0020) at byte 1`},
		{"a\xffb", `byte 0xff at 1 is not UTF-8`},
	} {
		err := dlock.ValidateName(c.name)
		if !errors.Is(err, dlock.ErrInvalidName) || !strings.Contains(err.Error(), c.want) ||
			!strings.Contains(err.Error(), "ASCII letters, digits") {
			t.Errorf("ValidateName(%q) = %v, want ErrInvalidName saying %s and what a name holds", c.name, err, c.want)
		}
	}
}

// A handle's text has nine fields and decodes to the same Handle; a text
// written before the CLI's holder left the library (a tenth field, empty)
// decodes as it did; one naming a holder, or with fields missing, is
// refused with ErrBadHandle.
func TestHandleText(t *testing.T) {
	h := dlock.Handle{Scheme: "redis", Name: "deploy-prod", Mode: driver.Permit, Limit: 3,
		Owner: "fedcba9876543210fedcba9876543210", Token: 42, TTL: 10 * time.Minute}
	text := h.String()
	if n := strings.Count(text, ".") + 1; n != 9 {
		t.Errorf("String() = %q: %d fields, want 9", text, n)
	}
	withDeadline := dlock.Handle{Scheme: "zk", Name: "jobs/a", Mode: driver.Read,
		Owner: "0123456789abcdef0123456789abcdef", Token: 7, TTL: 5 * time.Second, Deadline: time.UnixMilli(1796400000000)}
	for _, c := range []struct {
		text string
		want dlock.Handle
	}{
		{text, h},
		{withDeadline.String(), withDeadline},
		// Written by Handle.String before (its tenth field, the holder,
		// empty): decoded the same.
		{"dlock1.redis.permit.600000.0.42.3.fedcba9876543210fedcba9876543210.ZGVwbG95LXByb2Q.", h},
	} {
		if got, err := dlock.ParseHandle(c.text); err != nil || got != c.want {
			t.Errorf("ParseHandle(%q) = %+v, %v; want %+v", c.text, got, err, c.want)
		}
	}
	for _, s := range []string{
		// The dlock CLI's handle of a lock in its detached holder.
		"dlock1.zk.read.5000.1796400000000.7.0.0123456789abcdef0123456789abcdef.am9icy9h.L3J1bi91c2VyLzEwMDAvZGxvY2svaG9sZC1hYjEyLnNvY2s",
		"dlock1.redis.permit.600000.0.42.3.fedcba9876543210fedcba9876543210",
		text + "..",
		"dlock2" + strings.TrimPrefix(text, "dlock1"),
	} {
		if _, err := dlock.ParseHandle(s); !errors.Is(err, dlock.ErrBadHandle) {
			t.Errorf("ParseHandle(%q) = %v, want ErrBadHandle", s, err)
		}
	}
}

// lateDriver is a memlock driver whose first grants (late of them) arrive
// with their validity already over, as after a request that outlasted the
// TTL while the store failed over.
type lateDriver struct {
	*memlock.Driver
	late atomic.Int32
}

func (d *lateDriver) spend(g driver.Grant, err error) (driver.Grant, error) {
	if err == nil && d.late.Add(-1) >= 0 {
		g.Expires = time.Now().Add(-time.Millisecond)
	}
	return g, err
}

func (d *lateDriver) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return d.spend(d.Driver.TryLock(ctx, r))
}

func (d *lateDriver) Lock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return d.spend(d.Driver.Lock(ctx, r))
}

// A grant that arrives spent is never handed to the caller as a lease:
// Acquire releases it and tries again, TryAcquire releases it and fails
// with ErrNotAcquired. Either way the lock is free for others at once.
func TestSpentGrantIsReleased(t *testing.T) {
	store := memlock.NewStore()
	d := &lateDriver{Driver: store.Driver()}
	l := newLocker(t, d, dlock.WithTTL(time.Second))
	other := newMem(t, store)
	ctx := context.Background()

	d.late.Store(2)
	lease, err := l.Acquire(ctx, "spent")
	if err != nil {
		t.Fatalf("Acquire after two spent grants: %v", err)
	}
	if err := lease.Err(); err != nil {
		t.Errorf("the lease Acquire returned is already lost: %v", err)
	}
	if n := d.late.Load(); n != -1 {
		t.Errorf("%d spent grants left, want every one tried past (late = -1)", n)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}

	d.late.Store(1)
	if _, err := l.TryAcquire(ctx, "spent"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire with a spent grant: %v, want ErrNotAcquired", err)
	}
	if !isFree(t, other, "spent") {
		t.Error("the spent grant was not released")
	}
}

// tryOnly is a memlock driver without its Lock: a driver that cannot
// wait, which the Locker tries again after its backoff while the lock is
// busy.
type tryOnly struct{ driver.Driver }

// Acquire on a driver that cannot wait tries again after each backoff,
// counting the attempts from 1, until the lock is free.
func TestAcquireRetriesAfterBackoff(t *testing.T) {
	ctx := context.Background()
	store := memlock.NewStore()
	held, err := newMem(t, store).Acquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	var attempts []int
	l, err := dlock.New(tryOnly{store.Driver()}, dlock.WithBackoff(func(attempt int) time.Duration {
		attempts = append(attempts, attempt)
		if attempt == 3 {
			if err := held.Release(ctx); err != nil {
				t.Error(err)
			}
		}
		return time.Millisecond
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lease := mustAcquire(t, l, "job")
	if err := lease.Err(); err != nil {
		t.Errorf("the lease is not held: %v", err)
	}
	if want := []int{1, 2, 3}; !slices.Equal(attempts, want) {
		t.Errorf("backoff called for attempts %v, want %v", attempts, want)
	}
}

// The pause between tries never outlasts the holder's known expiry (its
// *HeldError), and ends with ctx.
func TestAcquireRetryPause(t *testing.T) {
	ctx := context.Background()
	store := memlock.NewStore()
	l := newLocker(t, tryOnly{store.Driver()}, dlock.WithBackoff(dlock.ConstantBackoff(time.Hour)))

	// A holder that does not renew: its lock is free after its TTL, long
	// before the backoff.
	if _, err := newMem(t, store, dlock.WithTTL(200*time.Millisecond), dlock.WithAutoRenew(false)).Acquire(ctx, "expiring"); err != nil {
		t.Fatal(err)
	}
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := l.Acquire(wait, "expiring"); err != nil {
		t.Errorf("Acquire of a lock that expires: %v; the pause went past the holder's expiry", err)
	}

	// A holder that renews: the wait ends with ctx.
	if _, err := newMem(t, store).Acquire(ctx, "renewed"); err != nil {
		t.Fatal(err)
	}
	wait, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(wait, "renewed"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire until ctx ends: %v, want context.DeadlineExceeded", err)
	}
}

// busyDriver finds every lock held, and records when each try came.
type busyDriver struct {
	mu    sync.Mutex
	tries []time.Time
}

func (d *busyDriver) TryLock(_ context.Context, r driver.Request) (driver.Grant, error) {
	d.mu.Lock()
	d.tries = append(d.tries, time.Now())
	d.mu.Unlock()
	return driver.Grant{}, &driver.HeldError{Name: r.Name}
}
func (d *busyDriver) Renew(context.Context, driver.Request) (time.Time, error) {
	return time.Time{}, driver.ErrNotHeld
}
func (d *busyDriver) Unlock(context.Context, driver.Request) error { return driver.ErrNotHeld }
func (d *busyDriver) Close() error                                 { return nil }

// TestOpenPollBounds: poll_min and poll_max set the waits between the
// tries of a driver that polls (each at least half of poll_min: the
// backoff draws from [d/2, d]), and bad values are *ParamErrors naming
// the parameter.
func TestOpenPollBounds(t *testing.T) {
	d := &busyDriver{}
	dlock.Register("polltest", func(context.Context, driver.URL) (driver.Driver, error) { return d, nil })
	ctx := context.Background()
	l, err := dlock.Open(ctx, "polltest://x?poll_min=40ms&poll_max=40ms")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	wait, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(wait, "busy"); err == nil {
		t.Fatal("Acquire of a lock always held succeeded")
	}
	d.mu.Lock()
	tries := slices.Clone(d.tries)
	d.mu.Unlock()
	if len(tries) < 2 {
		t.Fatalf("%d tries in 300ms, want at least 2", len(tries))
	}
	for i := 1; i < len(tries); i++ {
		if gap := tries[i].Sub(tries[i-1]); gap < 20*time.Millisecond {
			t.Errorf("try %d came %v after the last, below poll_min/2 = 20ms", i, gap)
		}
	}
	for _, c := range []struct{ url, param string }{
		{"polltest://x?poll_min=0s", "poll_min"},
		{"polltest://x?poll_min=soon", "poll_min"},
		{"polltest://x?poll_min=10ms&poll_max=5ms", "poll_max"},
	} {
		_, err := dlock.Open(ctx, c.url)
		if pe, ok := errors.AsType[*dlock.ParamError](err); !ok || pe.Param != c.param {
			t.Errorf("Open(%q) = %v, want a *ParamError naming %s", c.url, err, c.param)
		}
	}
}

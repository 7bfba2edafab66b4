package etcdlock_test

import (
	"context"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// locker takes one lock and returns its release.
type locker func(ctx context.Context) (release func() error, err error)

// BenchmarkHandoffConcurrency measures, in LayoutConcurrency, the
// handoff of one name from a holder on one side to a waiter, already
// queued, on the other, each side on a client of its own: ns/op is the
// time from the holder's release call to the waiter's acquisition
// returning. dlock→dlock and concurrency→concurrency are the same
// handoff within one side, for comparison. Between handoffs, untimed,
// the waiter releases, the holder takes the lock again and a new waiter
// queues.
func BenchmarkHandoffConcurrency(b *testing.B) {
	eps := testenv.EtcdEndpoints(b)
	admin := testenv.EtcdClient(b, eps)
	prefix := randomPrefix()
	const name = "handoff"
	pfx := prefix + "/" + name
	dlockSide := func() locker {
		l := concLocker(b, eps, prefix)
		locktest.Warm(b, l, name)
		return func(ctx context.Context) (func() error, error) {
			lease, err := l.Acquire(ctx, name)
			if err != nil {
				return nil, err
			}
			return func() error { return lease.Release(ctx) }, nil
		}
	}
	concSide := func() locker {
		s := concSession(b, eps, 30)
		return func(ctx context.Context) (func() error, error) {
			m := concurrency.NewMutex(s, pfx)
			if err := m.Lock(ctx); err != nil {
				return nil, err
			}
			return func() error { return m.Unlock(ctx) }, nil
		}
	}
	for _, c := range []struct {
		name     string
		from, to func() locker
	}{
		{"dlock→concurrency", dlockSide, concSide},
		{"concurrency→dlock", concSide, dlockSide},
		{"dlock→dlock", dlockSide, dlockSide},
		{"concurrency→concurrency", concSide, concSide},
	} {
		b.Run(c.name, func(b *testing.B) {
			handoffs(b, admin, pfx, c.from(), c.to())
		})
	}
}

// handoffs times b.N handoffs from from's holder to to's queued waiter.
func handoffs(b *testing.B, admin *clientv3.Client, pfx string, from, to locker) {
	ctx := context.Background()
	release, err := from(ctx)
	if err != nil {
		b.Fatal(err)
	}
	type got struct {
		release func() error
		err     error
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		done := make(chan got, 1)
		go func() {
			r, err := to(ctx)
			done <- got{r, err}
		}()
		waitQueue(b, admin, pfx+"/", 2)
		b.StartTimer()
		if err := release(); err != nil {
			b.Fatal(err)
		}
		g := <-done
		b.StopTimer()
		if g.err != nil {
			b.Fatal(g.err)
		}
		if err := g.release(); err != nil {
			b.Fatal(err)
		}
		if release, err = from(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	_ = release()
}

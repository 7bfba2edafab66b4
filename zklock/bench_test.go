package zklock_test

import (
	"context"
	"io"
	"log"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// The benchmarks compare zklock (through a dlock.Locker) with
// go-zookeeper's own zk.NewLock on the same server, each with one client
// (one session) shared by its goroutines, except in Contended8Sessions:
//
//	Uncontended         one goroutine acquires and releases one name
//	Parallel            goroutines (RunParallel) each take a name of their own
//	Contended8          8 goroutines contend for one name; ns/op is per hand-over
//	Contended8Sessions  the same with a client (session) per goroutine, as
//	                    separate processes would: hand-overs are not queued
//	                    behind the other contenders' requests in one session
//
// ns/op is an acquire+release pair; allocs/op counts the whole process.

type benchImpl struct {
	name string
	// take takes the lock called name.
	take func(ctx context.Context, name string) (locktest.Held, error)
}

// cycle takes the lock called name and releases it.
func (impl benchImpl) cycle(ctx context.Context, name string) error {
	h, err := impl.take(ctx, name)
	if err != nil {
		return err
	}
	return h.Release(ctx)
}

// heldZK is a held zk.Lock.
type heldZK struct{ l *zk.Lock }

func (h heldZK) Release(context.Context) error { return h.l.Unlock() }

// benchImpls returns the implementations, with clients that last until b
// (the parent benchmark) ends, on locks under prefix: clients that contend
// must share it.
func benchImpls(b *testing.B, prefix string) []benchImpl {
	servers := []string{testenv.ZKAddr(b)}

	locker, _ := newLocker(b, servers, prefix, 10*time.Second)
	zklockImpl := benchImpl{name: "zklock", take: func(ctx context.Context, name string) (locktest.Held, error) {
		return locker.Acquire(ctx, name)
	}}

	conn, _, err := zk.Connect(servers, 10*time.Second, zk.WithLogger(log.New(io.Discard, "", 0)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		removeTree(conn, prefix+"-newlock")
		conn.Close()
	})
	newLockImpl := benchImpl{name: "zk.NewLock", take: func(_ context.Context, name string) (locktest.Held, error) {
		l := zk.NewLock(conn, prefix+"-newlock/"+name, zk.WorldACL(zk.PermAll))
		return heldZK{l}, l.Lock()
	}}
	return []benchImpl{zklockImpl, newLockImpl}
}

// removeTree deletes p and everything under it.
func removeTree(c *zk.Conn, p string) {
	kids, _, err := c.Children(p)
	if err != nil {
		return
	}
	for _, k := range kids {
		removeTree(c, p+"/"+k)
	}
	_ = c.Delete(p, -1)
}

func BenchmarkUncontended(b *testing.B) {
	for _, impl := range benchImpls(b, testPrefix()) {
		b.Run(impl.name, func(b *testing.B) {
			ctx := context.Background()
			locktest.BenchCycle(b, ctx, func(ctx context.Context) (locktest.Held, error) { return impl.take(ctx, "uncontended") })
		})
	}
}

func BenchmarkParallel(b *testing.B) {
	for _, impl := range benchImpls(b, testPrefix()) {
		b.Run(impl.name, func(b *testing.B) {
			ctx := context.Background()
			if err := impl.cycle(ctx, "warm-up"); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			locktest.BenchParallel(b, 0, "parallel/", func(name string) error { return impl.cycle(ctx, name) })
		})
	}
}

func BenchmarkContended8(b *testing.B) {
	impls := benchImpls(b, testPrefix())
	for k := range impls {
		b.Run(impls[k].name, func(b *testing.B) {
			contend(b, func(int) benchImpl { return impls[k] })
		})
	}
}

func BenchmarkContended8Sessions(b *testing.B) {
	var clients [contenders][]benchImpl
	prefix := testPrefix()
	for w := range clients {
		clients[w] = benchImpls(b, prefix)
	}
	for k := range clients[0] {
		b.Run(clients[0][k].name, func(b *testing.B) {
			contend(b, func(w int) benchImpl { return clients[w][k] })
		})
	}
}

const contenders = 8

// contend runs contenders goroutines that take one name b.N times in all;
// worker w uses impl(w).
func contend(b *testing.B, impl func(w int) benchImpl) {
	ctx := context.Background()
	for w := range contenders {
		if err := impl(w).cycle(ctx, "warm-up"); err != nil {
			b.Fatal(err)
		}
	}
	locktest.BenchContend(b, ctx, contenders, func(ctx context.Context, w int) (locktest.Held, error) {
		return impl(w).take(ctx, "contended")
	})
}

// Benchmarks of the lock kinds besides the mutex, through a dlock.Locker
// on the standalone server, one goroutine, uncontended: ns/op is one
// acquire and its release (one campaign and its resignation).
//
//	Read        AcquireRead of a lock no one else uses
//	ReadShared  AcquireRead while another reader holds the lock (a
//	            listing more: the node is not alone)
//	Write       AcquireWrite
//	Permit      AcquirePermit of a semaphore of 4 of which another client
//	            holds a permit (still one round trip: the name's znode
//	            has no more than 4 children)
//	Campaign    Campaign and Release
//
// BenchmarkLeader, below, is one Leader read instead.

// benchKind measures kind's acquire and release of a name that, when
// shared, another client holds in the same kind.
func benchKind(b *testing.B, kind string, shared bool) {
	ctx := context.Background()
	servers, prefix := []string{testenv.ZKAddr(b)}, testPrefix()
	l, _ := newLocker(b, servers, prefix, 10*time.Second)
	if shared {
		other, _ := newLocker(b, servers, prefix, 10*time.Second)
		if _, err := locktest.Kind(other, kind, "bench")(ctx); err != nil {
			b.Fatal(err)
		}
	}
	locktest.BenchCycle(b, ctx, locktest.Kind(l, kind, "bench")) // connects outside the timer
}

func BenchmarkRead(b *testing.B)       { benchKind(b, "read", false) }
func BenchmarkReadShared(b *testing.B) { benchKind(b, "read", true) }
func BenchmarkWrite(b *testing.B)      { benchKind(b, "write", false) }
func BenchmarkPermit(b *testing.B)     { benchKind(b, "permit", true) }
func BenchmarkCampaign(b *testing.B)   { benchKind(b, "campaign", false) }

// BenchmarkMutex is the baseline: Acquire, in the same harness.
func BenchmarkMutex(b *testing.B) { benchKind(b, "mutex", false) }

// BenchmarkLeader is one Leader call on an election another client leads:
// the server is brought up to date with the leader first (a no-op
// transaction, see Driver.Inspect), then the election's znode is read.
func BenchmarkLeader(b *testing.B) {
	ctx := context.Background()
	servers, prefix := []string{testenv.ZKAddr(b)}, testPrefix()
	l, _ := newLocker(b, servers, prefix, 10*time.Second)
	other, _ := newLocker(b, servers, prefix, 10*time.Second)
	if _, err := other.Campaign(ctx, "bench", "them"); err != nil {
		b.Fatal(err)
	}
	if _, err := l.Leader(ctx, "bench"); err != nil { // connect outside the timer
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		info, err := l.Leader(ctx, "bench")
		if err != nil || info.Value != "them" {
			b.Fatalf("Leader = %+v, %v", info, err)
		}
	}
}

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
// (the parent benchmark) ends.
func benchImpls(b *testing.B) []benchImpl {
	servers := []string{testenv.ZKAddr(b)}
	prefix := testPrefix()

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
	for _, impl := range benchImpls(b) {
		b.Run(impl.name, func(b *testing.B) {
			ctx := context.Background()
			locktest.BenchCycle(b, ctx, func(ctx context.Context) (locktest.Held, error) { return impl.take(ctx, "uncontended") })
		})
	}
}

func BenchmarkParallel(b *testing.B) {
	for _, impl := range benchImpls(b) {
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
	impls := benchImpls(b)
	for k := range impls {
		b.Run(impls[k].name, func(b *testing.B) {
			contend(b, func(int) benchImpl { return impls[k] })
		})
	}
}

func BenchmarkContended8Sessions(b *testing.B) {
	var clients [contenders][]benchImpl
	for w := range clients {
		clients[w] = benchImpls(b)
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

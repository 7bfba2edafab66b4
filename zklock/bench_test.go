package zklock_test

import (
	"context"
	"io"
	"log"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockgo/dlock/internal/testenv"
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
	// lock returns the release function of the lock called name.
	lock func(b *testing.B, name string) func()
}

// benchImpls returns the implementations, with clients that last until b
// (the parent benchmark) ends.
func benchImpls(b *testing.B) []benchImpl {
	servers := []string{testenv.ZKAddr(b)}
	prefix := testPrefix()
	ctx := context.Background()

	locker, _ := newLocker(b, servers, prefix, 10*time.Second)
	zklockImpl := benchImpl{name: "zklock", lock: func(b *testing.B, name string) func() {
		lease, err := locker.Acquire(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		return func() {
			if err := lease.Release(ctx); err != nil {
				b.Error(err)
			}
		}
	}}

	conn, _, err := zk.Connect(servers, 10*time.Second, zk.WithLogger(log.New(io.Discard, "", 0)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		removeTree(conn, prefix+"-newlock")
		conn.Close()
	})
	newLockImpl := benchImpl{name: "zk.NewLock", lock: func(b *testing.B, name string) func() {
		l := zk.NewLock(conn, prefix+"-newlock/"+name, zk.WorldACL(zk.PermAll))
		if err := l.Lock(); err != nil {
			b.Fatal(err)
		}
		return func() {
			if err := l.Unlock(); err != nil {
				b.Error(err)
			}
		}
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
			impl.lock(b, "warm-up")() // connect outside the timer
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				impl.lock(b, "uncontended")()
			}
		})
	}
}

func BenchmarkParallel(b *testing.B) {
	for _, impl := range benchImpls(b) {
		b.Run(impl.name, func(b *testing.B) {
			impl.lock(b, "warm-up")()
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				name := "parallel/" + strconv.FormatInt(next.Add(1), 10)
				for pb.Next() {
					impl.lock(b, name)()
				}
			})
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
	for w := range contenders {
		impl(w).lock(b, "warm-up")()
	}
	var (
		n       atomic.Int64
		holders atomic.Int32
		wg      sync.WaitGroup
	)
	b.ReportAllocs()
	b.ResetTimer()
	for w := range contenders {
		wg.Go(func() {
			for n.Add(1) <= int64(b.N) {
				release := impl(w).lock(b, "contended")
				if holders.Add(1) != 1 {
					b.Error("two holders at once")
				}
				holders.Add(-1)
				release()
			}
		})
	}
	wg.Wait()
}

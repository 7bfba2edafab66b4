package interop

import (
	"context"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
)

// BenchmarkHandoffZK measures the handoff of a ZooKeeper lock between
// dlock and each peer (Curator, kazoo) in the peer's layout, both ways,
// and between two dlock clients in that layout: ns/op is the time from
// the holder's release to the waiter's holding, with the waiter queued
// (its node made and watched) beforehand. A peer's side runs in a process
// of its own, so that time includes a pipe: from dlock's Release call to
// the peer's "acquired" line, and from the line that tells the peer to
// release to dlock's Acquire returning. Each operation starts a JVM or an
// interpreter outside the timer; run with a fixed count:
//
//	cd interop && go test -run '^$' -bench HandoffZK -benchtime 20x .
func BenchmarkHandoffZK(b *testing.B) {
	for _, p := range zkPeers {
		b.Run(p.name+"/dlock-to-"+p.name, func(b *testing.B) {
			e := newZKEnv(b)
			l := e.locker(b, p.layout)
			ctx := context.Background()
			for b.Loop() {
				b.StopTimer()
				lease, err := l.Acquire(ctx, "h")
				if err != nil {
					b.Fatal(err)
				}
				h := startHolder(b, p.command(b, "hold", e.addr, "mutex", e.path("h"), b.TempDir(), p.name))
				e.waitChildren(b, "h", 2)
				time.Sleep(50 * time.Millisecond) // its watch set
				b.StartTimer()
				if err := lease.Release(ctx); err != nil {
					b.Fatal(err)
				}
				h.expect("acquired")
				b.StopTimer()
				h.release()
				b.StartTimer()
			}
		})
		b.Run(p.name+"/"+p.name+"-to-dlock", func(b *testing.B) {
			e := newZKEnv(b)
			l := e.locker(b, p.layout)
			ctx := context.Background()
			for b.Loop() {
				b.StopTimer()
				h := startHolder(b, p.command(b, "hold", e.addr, "mutex", e.path("h"), b.TempDir(), p.name))
				h.expect("acquired")
				got := acquireAsync(b, func() (*dlock.Lease, error) { return l.Acquire(ctx, "h") })
				e.waitChildren(b, "h", 2)
				time.Sleep(50 * time.Millisecond)
				b.StartTimer()
				if _, err := h.stdin.Write([]byte("\n")); err != nil {
					b.Fatal(err)
				}
				lease := <-got
				b.StopTimer()
				if lease == nil {
					b.FailNow()
				}
				h.expect("released")
				if err := lease.Release(ctx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
		b.Run(p.name+"/dlock-to-dlock", func(b *testing.B) {
			e := newZKEnv(b)
			a, w := e.locker(b, p.layout), e.locker(b, p.layout)
			ctx := context.Background()
			for b.Loop() {
				b.StopTimer()
				lease, err := a.Acquire(ctx, "h")
				if err != nil {
					b.Fatal(err)
				}
				got := acquireAsync(b, func() (*dlock.Lease, error) { return w.Acquire(ctx, "h") })
				e.waitChildren(b, "h", 2)
				time.Sleep(10 * time.Millisecond)
				b.StartTimer()
				if err := lease.Release(ctx); err != nil {
					b.Fatal(err)
				}
				next := <-got
				b.StopTimer()
				if next == nil {
					b.FailNow()
				}
				if err := next.Release(ctx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

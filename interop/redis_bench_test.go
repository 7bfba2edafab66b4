package interop

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// The handoff time of dlock's layout=redsync with each peer: from the
// holder's release to the waiter's acquisition, with the waiter on the
// other side (peer to dlock, dlock to peer), on dlock's side only (dlock
// to dlock), and on the peer's only, for comparison. ns/op is that time;
// allocs/op counts what every goroutine allocates meanwhile (the release,
// the waiter's attempts). Run with a fixed count, as each operation waits
// for a poll:
//
//	cd interop && go test -run '^$' -bench 'Handoff(Redsync|Bsm)' -benchtime 50x -benchmem .
//
// A waiter that polls wakes at a point of its poll cycle the release
// does not know: the waiter starts 20 to 320 ms before the release, at
// random, as if it had waited a while.

// handoffSide is one side of a handoff: take waits for the lock as the
// side's users wait, and returns its release.
type handoffSide struct {
	dlock bool
	take  func(ctx context.Context) (release func(context.Context) error, err error)
}

func dlockHandoffSide(b *testing.B, prefix, name string) handoffSide {
	l := newDlock(b, prefix)
	return handoffSide{dlock: true, take: func(ctx context.Context) (func(context.Context) error, error) {
		lease, err := l.Acquire(ctx, name)
		if err != nil {
			return nil, err
		}
		return lease.Release, nil
	}}
}

func peerHandoffSide(b *testing.B, p peer, key string) handoffSide {
	return handoffSide{take: func(ctx context.Context) (func(context.Context) error, error) {
		pl, err := p.acquire(ctx, key, 10*time.Second)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { _, err := pl.release(ctx); return err }, nil
	}}
}

func BenchmarkHandoffRedsync(b *testing.B) { benchHandoffs(b, "redsync") }

func BenchmarkHandoffBsm(b *testing.B) { benchHandoffs(b, "bsm") }

// benchHandoffs measures the handoffs between dlock and the peer called
// name, both ways, and within each side.
func benchHandoffs(b *testing.B, name string) {
	newPeer := peers(b)[name]
	for _, pair := range []struct{ from, to string }{{name, "dlock"}, {"dlock", name}, {"dlock", "dlock"}, {name, name}} {
		b.Run(pair.from+"-to-"+pair.to, func(b *testing.B) {
			prefix := redisPrefix(b)
			side := func(who string) handoffSide {
				if who == "dlock" {
					return dlockHandoffSide(b, prefix, "handoff")
				}
				return peerHandoffSide(b, newPeer(b), prefix+"handoff")
			}
			benchHandoff(b, side(pair.from), side(pair.to))
		})
	}
}

type taken struct {
	release func(context.Context) error
	err     error
}

func benchHandoff(b *testing.B, from, to handoffSide) {
	ctx := b.Context()
	b.ReportAllocs()
	for range b.N {
		b.StopTimer()
		release, err := from.take(ctx)
		if err != nil {
			b.Fatal(err)
		}
		got := make(chan taken, 1)
		go func() {
			r, err := to.take(ctx)
			got <- taken{r, err}
		}()
		if from.dlock && to.dlock {
			time.Sleep(10 * time.Millisecond) // the waiter has failed once and subscribed
		} else {
			time.Sleep(20*time.Millisecond + rand.N(300*time.Millisecond))
		}
		b.StartTimer()
		if err := release(ctx); err != nil {
			b.Fatal(err)
		}
		t := <-got
		b.StopTimer()
		if t.err != nil {
			b.Fatal(t.err)
		}
		if err := t.release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/locktest"
)

// benchClients are the two client set-ups the benchmarks compare: the one
// the URL opener makes, and go-redis's defaults (what a user passing
// redis.NewClient(&redis.Options{Addr: a}) gets).
var benchClients = []struct {
	name string
	make func(b *testing.B, c *cluster) []redis.UniversalClient
}{
	{"clients=opener", func(b *testing.B, c *cluster) []redis.UniversalClient { return c.clients(b) }},
	{"clients=autopipeline", func(b *testing.B, c *cluster) []redis.UniversalClient {
		cs := c.clients(b)
		for i, rc := range cs {
			ap, err := rc.(*redis.Client).AutoPipeline()
			if err != nil {
				b.Fatal(err)
			}
			cs[i] = ap
		}
		return cs
	}},
	{"clients=default", func(b *testing.B, c *cluster) []redis.UniversalClient {
		cs := make([]redis.UniversalClient, len(c.servers))
		for i, s := range c.servers {
			rc := redis.NewClient(&redis.Options{Addr: s.Addr})
			b.Cleanup(func() { _ = rc.Close() })
			cs[i] = rc
		}
		return cs
	}},
}

// benchContexts are the three kinds of context a caller passes: none, a
// request's (cancellable, no deadline), and one with a deadline.
var benchContexts = []struct {
	name string
	make func(b *testing.B) context.Context
}{
	{"ctx=background", func(b *testing.B) context.Context { return context.Background() }},
	{"ctx=cancel", func(b *testing.B) context.Context {
		ctx, cancel := context.WithCancel(context.Background())
		b.Cleanup(cancel)
		return ctx
	}},
	{"ctx=timeout", func(b *testing.B) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		b.Cleanup(cancel)
		return ctx
	}},
}

// eachSetup runs f under every client set-up and context kind.
func eachSetup(b *testing.B, c *cluster, f func(b *testing.B, cs []redis.UniversalClient, ctx context.Context)) {
	for _, bc := range benchClients {
		for _, bx := range benchContexts {
			b.Run(bc.name+"/"+bx.name, func(b *testing.B) { f(b, bc.make(b, c), bx.make(b)) })
		}
	}
}

func benchLocker(b *testing.B, cs []redis.UniversalClient) *dlock.Locker {
	l := locktest.Opened(b)(New(cs, nil, dlock.WithTTL(10*time.Second)))
	prepare(b, l.Driver().(*Driver))
	return l
}

// BenchmarkAcquireRelease: one goroutine takes and releases one name in a
// loop over 5 nodes, fencing on (the default).
func BenchmarkAcquireRelease(b *testing.B) {
	eachSetup(b, newCluster(b, 5), func(b *testing.B, cs []redis.UniversalClient, ctx context.Context) {
		l := benchLocker(b, cs)
		locktest.BenchCycle(b, ctx, locktest.Kind(l, "mutex", uniqueName("bench/s1")))
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	})
}

// BenchmarkParallelDistinct: 16 goroutines (8 per CPU on this 2-core
// machine: SetParallelism(16/GOMAXPROCS)) each take and release a name
// of their own, over 5 nodes.
func BenchmarkParallelDistinct(b *testing.B) {
	eachSetup(b, newCluster(b, 5), func(b *testing.B, cs []redis.UniversalClient, ctx context.Context) {
		l := benchLocker(b, cs)
		locktest.BenchParallel(b, 16, uniqueName("bench/s2")+"/", func(name string) error { return locktest.Cycle(ctx, l, name) })
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	})
}

// BenchmarkDriver: TryLock and Unlock on the driver alone (no Locker, no
// lease), one goroutine, 5 nodes: the driver's own cost.
func BenchmarkDriver(b *testing.B) {
	c := newCluster(b, 5)
	d, err := NewDriver(c.clients(b), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Close() })
	prepare(b, d)
	ctx := context.Background()
	r := driver.Request{Name: uniqueName("bench/driver"), Owner: newOwner(), TTL: 10 * time.Second}
	var failed int
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.TryLock(ctx, r); err != nil {
			if !errors.Is(err, dlock.ErrNoQuorum) {
				b.Fatal(err)
			}
			failed++ // too slow for the node timeout: the machine is loaded
			continue
		}
		if err := d.Unlock(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	b.ReportMetric(float64(failed)/float64(b.N), "noquorum/op")
}

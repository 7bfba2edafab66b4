// Command spawnprobe measures how the way a client waits for Redis changes
// the latency of a lone round trip on this machine. Each operation is the
// raw loop's pair of round trips (SET NX PX, then an owner-checked script
// delete), made in one of these ways, the ways taking turns in blocks:
//
//   - direct: the calling goroutine sends and waits, as a plain go-redis
//     call does;
//   - spare: an empty goroutine is started before each round trip, which
//     makes the runtime wake an idle thread (what dlock's redispipe does
//     for a lone call);
//   - handover: each round trip runs on a new goroutine that the caller
//     waits for, as redsync runs every request;
//   - busy: a goroutine spins until the operation ends, keeping a CPU
//     awake throughout (a diagnostic: it costs a CPU for the whole wait).
//
// On a virtual machine whose idle vCPUs halt, the differences show what
// waking them costs (see docs/BENCHMARKS.md).
//
//	go run ./cmd/spawnprobe -n 500 -rounds 20
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/bench/internal/harness"
)

var del = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`)

func main() {
	addr := flag.String("redis", "127.0.0.1:6379", "Redis address (loopback only)")
	n := flag.Int("n", 500, "operations per block")
	rounds := flag.Int("rounds", 20, "blocks per way")
	flag.Parse()
	if err := harness.Loopback(*addr); err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: *addr})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		log.Fatal(err)
	}
	const key = "dlock-bench:spawnprobe"
	defer c.Del(ctx, key)
	set := func() { c.SetNX(ctx, key, "v", 10*time.Second) }
	unset := func() { del.Run(ctx, c, []string{key}, "v") }

	type way struct {
		name string
		op   func()
	}
	ways := []way{
		{"direct", func() { set(); unset() }},
		{"spare", func() {
			go func() {}()
			set()
			go func() {}()
			unset()
		}},
		{"handover", func() {
			for _, f := range []func(){set, unset} {
				done := make(chan struct{})
				go func() { f(); close(done) }()
				<-done
			}
		}},
		{"busy", func() {
			var stop atomic.Bool
			go func() {
				for !stop.Load() {
				}
			}()
			set()
			unset()
			stop.Store(true)
		}},
	}
	lat := make([][]time.Duration, len(ways))
	for range *rounds {
		for i, w := range ways {
			for range *n {
				t0 := time.Now()
				w.op()
				lat[i] = append(lat[i], time.Since(t0))
			}
		}
	}
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	fmt.Println("way        p10 µs  p50 µs  p90 µs  p99 µs")
	for i, w := range ways {
		l := lat[i]
		slices.Sort(l)
		q := func(p int) float64 { return us(l[len(l)*p/100]) }
		fmt.Printf("%-9s %7.1f %7.1f %7.1f %7.1f\n", w.name, q(10), q(50), q(90), q(99))
	}
}

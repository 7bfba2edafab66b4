package redislock

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/internal/testenv"
)

// rawDelete is the delete script of the raw SET NX PX loop, the
// baseline of BenchmarkServerCost.
var rawDelete = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// rawFencedAcquire is SET NX PX and INCR of a fencing counter in one
// script: the least a lock with fencing tokens asks of the server.
var rawFencedAcquire = redis.NewScript(`if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return redis.call('INCR', KEYS[2]) end return 0`)

// scriptedAcquire is SET NX PX in a script taking three arguments (owner,
// a prefix length for re-obtaining, the TTL), the shape of bsm/redislock's
// obtain script when the lock is free.
var scriptedAcquire = redis.NewScript(`if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[3]) then return redis.status_reply('OK') end return false`)

// BenchmarkServerCost: the server's time per uncontended acquire+release
// (server-us/op, from INFO commandstats on a private redis-server: the
// usec of the commands the client sent, which include those a script
// runs), for a Locker, for the raw loop of SET NX PX and a delete script,
// for that loop with the SET in a script as bsm/redislock sends it
// (scripted), and for that loop with a fencing token (raw-fenced: SET NX
// PX and INCR in one script, then the delete script). Rerun with
//
//	go test -run '^$' -bench ServerCost -count 5 ./redislock/
func BenchmarkServerCost(b *testing.B) {
	srv := testenv.StartRedis(b, testenv.RedisOptions{})
	c := srv.Client()
	ctx := context.Background()
	b.Run("dlock", func(b *testing.B) {
		d := newDriverOn(b, c, nil)
		l := newLocker(b, d)
		lease, err := l.Acquire(ctx, "cost") // loads the scripts
		if err != nil {
			b.Fatal(err)
		}
		_ = lease.Release(ctx)
		serverCost(b, c, func() {
			lease, err := l.Acquire(ctx, "cost")
			if err != nil {
				b.Fatal(err)
			}
			if err := lease.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}, "evalsha", "eval")
	})
	b.Run("raw", func(b *testing.B) {
		_ = rawDelete.Load(ctx, c).Err()
		serverCost(b, c, func() {
			if ok, err := c.SetNX(ctx, "cost", "me", 10e9).Result(); err != nil || !ok {
				b.Fatal(ok, err)
			}
			if err := rawDelete.Run(ctx, c, []string{"cost"}, "me").Err(); err != nil {
				b.Fatal(err)
			}
		}, "set", "evalsha", "eval")
	})
	b.Run("scripted", func(b *testing.B) {
		_ = rawDelete.Load(ctx, c).Err()
		_ = scriptedAcquire.Load(ctx, c).Err()
		keys := []string{"cost"}
		serverCost(b, c, func() {
			if err := scriptedAcquire.Run(ctx, c, keys, "me", 2, 10000).Err(); err != nil {
				b.Fatal(err)
			}
			if err := rawDelete.Run(ctx, c, keys, "me").Err(); err != nil {
				b.Fatal(err)
			}
		}, "evalsha", "eval")
	})
	b.Run("raw-fenced", func(b *testing.B) {
		_ = rawDelete.Load(ctx, c).Err()
		_ = rawFencedAcquire.Load(ctx, c).Err()
		keys := []string{"{cost}", "{cost}:fence"}
		serverCost(b, c, func() {
			if n, err := rawFencedAcquire.Run(ctx, c, keys, "me", 10000).Int64(); err != nil || n == 0 {
				b.Fatal(n, err)
			}
			if err := rawDelete.Run(ctx, c, keys[:1], "me").Err(); err != nil {
				b.Fatal(err)
			}
		}, "evalsha", "eval")
	})
}

// serverCost runs op b.N times and reports the server's usec per op
// spent in the commands named (those op sends).
func serverCost(b *testing.B, c *redis.Client, op func(), commands ...string) {
	ctx := context.Background()
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		op()
	}
	b.StopTimer()
	stats, err := commandStats(ctx, c)
	if err != nil {
		b.Fatal(err)
	}
	var usec float64
	for _, name := range commands {
		usec += stats[name].usec
	}
	b.ReportMetric(usec/float64(b.N), "server-us/op")
}

// cmdStat is one command's line of INFO commandstats.
type cmdStat struct {
	calls int64
	usec  float64
}

// commandStats reads INFO commandstats: the calls and usec of each command
// since the last CONFIG RESETSTAT, by lower-case name.
func commandStats(ctx context.Context, c *redis.Client) (map[string]cmdStat, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	stats := map[string]cmdStat{}
	for _, line := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "cmdstat_")), ":")
		if !ok {
			continue
		}
		var st cmdStat
		for _, f := range strings.Split(fields, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				st.usec, _ = strconv.ParseFloat(v, 64)
			}
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				st.calls, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		stats[name] = st
	}
	return stats, nil
}

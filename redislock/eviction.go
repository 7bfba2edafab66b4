package redislock

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/internal/redisutil"
)

// checkEviction reads the maxmemory-policy of c's server (of each master,
// for a Redis Cluster) and logs one warning on log when it may evict lock
// keys, or at Debug why it could not be read (see Eviction in docs/REDIS.md).
func checkEviction(ctx context.Context, c redis.UniversalClient, log *slog.Logger) {
	risky := redisutil.Evicting(ctx, []redis.UniversalClient{c}, redisutil.CheckTimeout, func(addr string, err error) {
		log.DebugContext(ctx, "redislock: cannot read maxmemory-policy; whether Redis may evict lock keys is not checked",
			"addr", addr, "err", err)
	})
	if len(risky) > 0 {
		log.WarnContext(ctx, fmt.Sprintf("redislock: Redis may evict lock keys: maxmemory-policy is %s; "+
			"an evicted lock key frees the lock while its holder still believes it holds it, and another client can take it at once; "+
			"set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in redis.conf) on a Redis that holds locks",
			strings.Join(risky, ", ")),
			"maxmemory-policy", risky[0][:strings.IndexByte(risky[0], ' ')])
	}
}

// startEvictionCheck runs checkEviction in the background, for a driver
// made by NewDriver, which has no context to make a request with and must
// not wait for one: Close cancels it (a driver closed at once is not
// checked) and waits for it to end.
func (d *Driver) startEvictionCheck(log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), redisutil.CheckTimeout)
	d.stopCheck = cancel
	d.checking.Add(1)
	go func() {
		defer d.checking.Done()
		defer cancel()
		checkEviction(ctx, d.client, log)
	}()
}

// logger returns o's Logger, or slog.Default() when it is nil: a warning
// that locks may be evicted must reach someone by default.
func logger(o *Options) *slog.Logger {
	if o != nil && o.Logger != nil {
		return o.Logger
	}
	return slog.Default()
}

// GoRedisLogger passes go-redis's own messages, which do not go through
// dlock.WithLogger nor Options.Logger, to a slog.Logger (see go-redis's
// own logs in docs/REDIS.md); make one with SlogLogger.
type GoRedisLogger struct {
	l     *slog.Logger
	level slog.Level
}

// SlogLogger returns a logger for redis.SetLogger that writes each of
// go-redis's messages to l at level, with the attribute logger=go-redis
// (package redlock's clients too); messages below l's level cost no
// formatting. slog.LevelDebug is the level to choose unless go-redis's
// messages are wanted in normal operation: see docs/REDIS.md.
func SlogLogger(l *slog.Logger, level slog.Level) GoRedisLogger {
	return GoRedisLogger{l: l, level: level}
}

// Printf implements go-redis's logging interface (redis.SetLogger).
func (g GoRedisLogger) Printf(ctx context.Context, format string, v ...any) {
	if ctx == nil {
		ctx = context.Background()
	}
	if !g.l.Enabled(ctx, g.level) {
		return
	}
	g.l.Log(ctx, g.level, fmt.Sprintf(format, v...), "logger", "go-redis")
}

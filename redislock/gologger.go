package redislock

import (
	"context"
	"fmt"
	"log/slog"
)

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

package harness

import (
	"context"
	"fmt"

	"github.com/dlockgo/dlock"
	dlockredis "github.com/dlockgo/dlock/redislock"
	dlockredlock "github.com/dlockgo/dlock/redlock"
	"github.com/redis/go-redis/v9"
)

func init() {
	specs = append([]Spec{
		{Name: DlockRedis, New: newDlockRedis},
		{Name: DlockRedisPlain, OptIn: true, New: newDlockRedisPlain},
		{Name: DlockRedlock, Private: true, New: newDlockRedlock},
	}, specs...)
}

// dlockImpl is a dlock Locker over go-redis clients the benchmark owns.
type dlockImpl struct {
	l       *dlock.Locker
	clients []*redis.Client
}

// newDlockRedis is dlock's redis backend (the redis:// scheme) over
// NewClient's client, TTL 10 s, automatic renewal on (the default).
func newDlockRedis(e *Env) (Impl, error) { return dlockRedis(NewClient(e.Shared)) }

// newDlockRedisPlain is dlock-redis over a client that does not bound
// socket I/O by contexts: a lone call with a deadline is then sent by a
// goroutine of its own, so that Acquire still returns when its context
// ends (see redislock's package documentation, Requests).
func newDlockRedisPlain(e *Env) (Impl, error) { return dlockRedis(NewPlainClient(e.Shared)) }

func dlockRedis(c *redis.Client) (Impl, error) {
	l, err := dlockredis.New(c, nil, dlock.WithTTL(TTL))
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return &dlockImpl{l: l, clients: []*redis.Client{c}}, nil
}

// newDlockRedlock is dlock's redlock backend (the redlock:// scheme) over
// the 5 private nodes, with default go-redis clients (as redsync-5 has),
// fencing tokens on (the default), TTL 10 s, automatic renewal on.
func newDlockRedlock(e *Env) (Impl, error) {
	if len(e.Nodes) < 5 {
		return nil, fmt.Errorf("%s needs 5 nodes, have %d", DlockRedlock, len(e.Nodes))
	}
	var clients []*redis.Client
	var ucs []redis.UniversalClient
	for _, a := range e.Nodes[:5] {
		c := NewClient(a)
		clients = append(clients, c)
		ucs = append(ucs, c)
	}
	l, err := dlockredlock.New(ucs, nil, dlock.WithTTL(TTL))
	if err != nil {
		for _, c := range clients {
			_ = c.Close()
		}
		return nil, err
	}
	return &dlockImpl{l: l, clients: clients}, nil
}

func (d *dlockImpl) Acquire(ctx context.Context, key string) (Held, error) {
	lease, err := d.l.Acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	return lease, nil
}

func (d *dlockImpl) Close() error {
	err := d.l.Close()
	for _, c := range d.clients {
		_ = c.Close()
	}
	return err
}

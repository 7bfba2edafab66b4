package harness

import (
	"context"
	"fmt"
	"strings"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	_ "github.com/dlockgo/dlock/natslock" // the nats:// scheme
	dlockredis "github.com/dlockgo/dlock/redislock"
	_ "github.com/dlockgo/dlock/redlock" // the redlock:// scheme
	"github.com/redis/go-redis/v9"
)

func init() {
	specs = append([]Spec{
		{Name: DlockRedis, New: newDlockRedis},
		{Name: DlockRedisClient, OptIn: true, New: newDlockRedisClient},
		{Name: DlockRedisAutoPipe, OptIn: true, New: newDlockRedisAutoPipe},
		{Name: DlockRedisDriver, OptIn: true, New: newDlockRedisDriver},
		{Name: DlockRedlock, Private: true, New: newDlockRedlock},
		{Name: DlockNATS, NATS: true, New: newDlockNATS},
	}, specs...)
}

// dlockImpl is a dlock Locker.
type dlockImpl struct {
	l      *dlock.Locker
	client *redis.Client // closed by Close, when the Locker does not own it
}

// newDlockRedis is dlock's redis backend as a new user opens it:
// dlock.Open("redis://host:port", dlock.WithTTL(10s)), so with the go-redis
// client that URL builds (see redislock's package documentation), automatic
// renewal on (the default).
func newDlockRedis(e *Env) (Impl, error) {
	return open("redis://" + e.Shared)
}

// newDlockRedlock is dlock's redlock backend over the 5 private nodes as a
// new user opens it: dlock.Open("redlock://n1,…,n5", dlock.WithTTL(10s)),
// fencing tokens on (the default), automatic renewal on.
func newDlockRedlock(e *Env) (Impl, error) {
	if len(e.Nodes) < 5 {
		return nil, fmt.Errorf("%s needs 5 nodes, have %d", DlockRedlock, len(e.Nodes))
	}
	return open("redlock://" + strings.Join(e.Nodes[:5], ","))
}

// newDlockNATS is dlock's nats backend as a new user opens it:
// dlock.Open("nats://127.0.0.1:port/bucket", dlock.WithTTL(10s)), so with
// the connection that URL builds and this run's bucket, which it creates
// (file storage, one replica, the defaults), automatic renewal on.
func newDlockNATS(e *Env) (Impl, error) {
	if e.NATS == "" {
		return nil, fmt.Errorf("%s needs the benchmark's nats-server (StartNATS)", DlockNATS)
	}
	return open(e.NATS + "/" + e.Bucket(DlockNATS))
}

func open(url string) (Impl, error) {
	l, err := dlock.Open(context.Background(), url, dlock.WithTTL(TTL))
	if err != nil {
		return nil, err
	}
	return &dlockImpl{l: l}, nil
}

// newDlockRedisClient is dlock's redis backend over a go-redis client with
// default options (NewClient), as a user who already has one passes it.
func newDlockRedisClient(e *Env) (Impl, error) {
	c := NewClient(e.Shared)
	l, err := dlockredis.New(c, nil, dlock.WithTTL(TTL))
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return &dlockImpl{l: l, client: c}, nil
}

// newDlockRedisAutoPipe is dlock's redis backend over the auto-pipelining
// client of a go-redis client with default options.
func newDlockRedisAutoPipe(e *Env) (Impl, error) {
	c := NewClient(e.Shared)
	ap, err := c.AutoPipeline()
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	l, err := dlockredis.New(ap, nil, dlock.WithTTL(TTL))
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return &dlockImpl{l: l, client: c}, nil
}

// dlockDriver is a redislock.Driver called directly (DlockRedisDriver).
type dlockDriver struct {
	d *dlockredis.Driver
	c *redis.Client
}

// driverHeld is a lock dlockDriver holds.
type driverHeld struct {
	d *dlockredis.Driver
	r driver.Request
}

func newDlockRedisDriver(e *Env) (Impl, error) {
	c := NewClient(e.Shared)
	return &dlockDriver{d: dlockredis.NewDriver(c, nil), c: c}, nil
}

// Acquire waits for the lock as Locker.Acquire does (Lock: queued, told
// of the release), with a new 128-bit owner as a Locker makes one.
func (d *dlockDriver) Acquire(ctx context.Context, key string) (Held, error) {
	r := driver.Request{Name: key, Owner: ownerValue(), TTL: TTL}
	if _, err := d.d.Lock(ctx, r); err != nil {
		return nil, err
	}
	return &driverHeld{d: d.d, r: r}, nil
}

func (h *driverHeld) Release(ctx context.Context) error { return h.d.Unlock(ctx, h.r) }

func (d *dlockDriver) Close() error {
	err := d.d.Close()
	_ = d.c.Close()
	return err
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
	if d.client != nil {
		_ = d.client.Close()
	}
	return err
}

package gocronlock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/dlockgo/dlock"
)

// Defaults of the Locker's options.
const (
	// DefaultPrefix starts the name of every job lock.
	DefaultPrefix = "gocron/"
	// DefaultMinHold is how long a job's lock is kept at least, from the
	// start of the run, when WithMinHold is not given.
	DefaultMinHold = time.Second
)

// Locker is a gocron.Locker over a *dlock.Locker: a job runs on the
// scheduler that takes its lock, and is skipped on the others. Create it
// with New. It is safe for concurrent use.
type Locker struct {
	l        *dlock.Locker
	prefix   string
	minHold  time.Duration
	lockOpts []dlock.Option

	wg sync.WaitGroup // releases delayed by MinHold
}

// An Option configures a Locker.
type Option func(*Locker)

// WithPrefix sets the start of every job lock's name; the default is
// DefaultPrefix. It may be empty.
func WithPrefix(p string) Option { return func(x *Locker) { x.prefix = p } }

// WithMinHold sets how long a job's lock is kept at least, from the start
// of the run (see the package doc, Once per run). Zero releases the lock
// as soon as the job ends. The default is DefaultMinHold.
func WithMinHold(d time.Duration) Option { return func(x *Locker) { x.minHold = max(d, 0) } }

// WithLockOptions sets dlock options for every job lock, such as
// dlock.WithTTL.
func WithLockOptions(opts ...dlock.Option) Option {
	return func(x *Locker) { x.lockOpts = append(x.lockOpts, opts...) }
}

// New returns a Locker that takes job locks on l. The Locker does not own
// l: close l when the schedulers are shut down.
func New(l *dlock.Locker, opts ...Option) *Locker {
	x := &Locker{l: l, prefix: DefaultPrefix, minHold: DefaultMinHold}
	for _, o := range opts {
		if o != nil {
			o(x)
		}
	}
	return x
}

// LockName returns the name of the dlock lock for the job called key.
func (x *Locker) LockName(key string) string {
	name := x.prefix + key
	if dlock.ValidateName(name) == nil {
		return name
	}
	sum := sha256.Sum256([]byte(key))
	return x.prefix + "sha256/" + hex.EncodeToString(sum[:16])
}

// Lock implements gocron.Locker: one attempt to take the lock of the job
// called key. It fails, and gocron skips the run, when another instance
// holds it. The error then matches dlock.ErrNotAcquired.
func (x *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	name := x.LockName(key)
	lease, err := x.l.TryAcquire(ctx, name, x.lockOpts...)
	if err != nil {
		return nil, fmt.Errorf("gocronlock: job %q: %w", key, err)
	}
	return &jobLock{x: x, lease: lease, started: time.Now()}, nil
}

// Wait waits until the releases that MinHold delayed are done: call it
// after the schedulers' Shutdown, before closing the dlock Locker, so that
// every lock is released promptly rather than by Close.
func (x *Locker) Wait() { x.wg.Wait() }

// jobLock is one run's lock.
type jobLock struct {
	x       *Locker
	lease   *dlock.Lease
	started time.Time
	once    sync.Once
}

// Unlock implements gocron.Lock. The lock is released now if MinHold has
// passed since the run started, else when it has (Unlock returns at once
// then, with nil). A lock lost during the run gives an error matching
// dlock.ErrLost.
func (k *jobLock) Unlock(ctx context.Context) error {
	var err error
	k.once.Do(func() {
		wait := k.x.minHold - time.Since(k.started)
		if wait <= 0 {
			err = k.release(ctx)
			return
		}
		if lost := k.lease.Err(); lost != nil && errors.Is(lost, dlock.ErrLost) {
			err = fmt.Errorf("gocronlock: %w", lost)
			return
		}
		k.x.wg.Add(1)
		time.AfterFunc(wait, func() {
			defer k.x.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = k.release(ctx)
		})
	})
	return err
}

func (k *jobLock) release(ctx context.Context) error {
	if err := k.lease.Release(ctx); err != nil {
		return fmt.Errorf("gocronlock: %w", err)
	}
	return nil
}

var _ gocron.Locker = (*Locker)(nil)

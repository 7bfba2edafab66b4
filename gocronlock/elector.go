package gocronlock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

// ErrNotLeader is IsLeader's answer on an instance that does not lead.
var ErrNotLeader = errors.New("gocronlock: not the leader")

// campaignRetry is the pause before campaigning again after a failed
// campaign (the backend unreachable).
const campaignRetry = time.Second

// Elector is a gocron.Elector over a *dlock.Locker: one instance at a time
// leads, and gocron runs jobs only there. It campaigns in the background
// from NewElector until Close: with the backend's elections where it has
// them (dlock's Campaign), else with a mutex of the same name. When the
// leader's lease is lost or it closes, another instance takes over. It is
// safe for concurrent use.
type Elector struct {
	l     *dlock.Locker
	name  string
	value string

	cancel context.CancelFunc
	done   chan struct{}
	lease  atomic.Pointer[dlock.Lease] // nil when not leading
}

// NewElector starts campaigning for the election called name on l, with
// value (empty: "<hostname>/<pid>") as the identity observers see. Close
// it to resign and stop. The Elector does not own l.
func NewElector(l *dlock.Locker, name, value string, opts ...dlock.Option) (*Elector, error) {
	if err := dlock.ValidateName(name); err != nil {
		return nil, err
	}
	if value == "" {
		host, _ := os.Hostname()
		value = host + "/" + strconv.Itoa(os.Getpid())
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Elector{l: l, name: name, value: value, cancel: cancel, done: make(chan struct{})}
	go e.campaign(ctx, opts)
	return e, nil
}

// campaign runs for leader until ctx ends, and again each time leadership
// is lost.
func (e *Elector) campaign(ctx context.Context, opts []dlock.Option) {
	defer close(e.done)
	useElection := e.l.Supports(driver.Leader)
	for ctx.Err() == nil {
		var lease *dlock.Lease
		var err error
		if useElection {
			lease, err = e.l.Campaign(ctx, e.name, e.value, opts...)
		} else {
			lease, err = e.l.Acquire(ctx, e.name, opts...)
		}
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(campaignRetry):
			}
			continue
		}
		e.lease.Store(lease)
		select {
		case <-lease.Done():
		case <-ctx.Done():
		}
		e.lease.Store(nil)
		if ctx.Err() != nil {
			rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = lease.Release(rctx)
			cancel()
		}
	}
}

// IsLeader implements gocron.Elector: nil while this instance leads, an
// error matching ErrNotLeader otherwise.
func (e *Elector) IsLeader(context.Context) error {
	if lease := e.lease.Load(); lease == nil || lease.Err() != nil {
		return fmt.Errorf("%w of %q", ErrNotLeader, e.name)
	}
	return nil
}

// Lease returns the leadership's lease (its fencing token, its Done), or
// nil when this instance does not lead.
func (e *Elector) Lease() *dlock.Lease { return e.lease.Load() }

// Close stops campaigning and resigns if this instance leads. It is
// idempotent.
func (e *Elector) Close() error {
	e.cancel()
	<-e.done
	return nil
}

var _ gocron.Elector = (*Elector)(nil)

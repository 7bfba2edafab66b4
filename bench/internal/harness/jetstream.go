package harness

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ---- raw nats.go jetstream KV loop ----

// RawJetStreamMarkerTTL is the LimitMarkerTTL of the raw loop's bucket,
// which enables per-key TTLs (and is how long expired keys' markers stay):
// natslock's default, so that both buckets keep their markers alike.
const RawJetStreamMarkerTTL = time.Minute

// rawJS is the lock a user writes with nats.go's jetstream KV API: Create
// with a per-key TTL to acquire, Delete naming the revision to release,
// and, while the key is held, a fixed RawRetry sleep between attempts (as
// the raw go-redis loop). No fencing, renewal or notification.
type rawJS struct {
	nc *nats.Conn
	kv jetstream.KeyValue
}

type rawJSHeld struct {
	kv  jetstream.KeyValue
	key string
	rev uint64
}

// newRawJetStream connects to the private nats-server with nats.go's
// default options and creates this run's bucket (file storage, per-key
// TTLs).
func newRawJetStream(e *Env) (Impl, error) {
	if e.NATS == "" {
		return nil, fmt.Errorf("%s needs the benchmark's nats-server (StartNATS)", RawJetStream)
	}
	nc, err := nats.Connect(e.NATS)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:         e.Bucket(RawJetStream),
		LimitMarkerTTL: RawJetStreamMarkerTTL,
	})
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &rawJS{nc: nc, kv: kv}, nil
}

func (r *rawJS) Acquire(ctx context.Context, key string) (Held, error) {
	val := []byte(ownerValue())
	return poll(ctx, func() (Held, error) {
		rev, err := r.kv.Create(ctx, key, val, jetstream.KeyTTL(TTL))
		if err == nil {
			return &rawJSHeld{kv: r.kv, key: key, rev: rev}, nil
		}
		if errors.Is(err, jetstream.ErrKeyExists) {
			return nil, errHeld
		}
		return nil, err
	})
}

func (h *rawJSHeld) Release(ctx context.Context) error {
	return h.kv.Delete(ctx, h.key, jetstream.LastRevision(h.rev))
}

func (r *rawJS) Close() error {
	r.nc.Close()
	return nil
}

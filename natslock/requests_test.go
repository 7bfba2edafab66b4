package natslock_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/natslock"
)

// TestRequestsPerOperation counts the messages each operation sends on
// the driver's own connection: an acquisition of a free key whose marker
// the driver knows, a renewal and a release are one request each; a
// failed TryLock is two (the refused write, a read of the holder); the
// first acquisition of a key another driver released is three.
func TestRequestsPerOperation(t *testing.T) {
	c := testenv.StartNATS(t, 1)
	o := &natslock.Options{Bucket: randomBucket()}
	ctx := ctxTimeout(t, 30*time.Second)
	nc := c.Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	d, err := natslock.NewDriver(ctx, js, o)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	other := newDriver(t, c, o)
	count := func(what string, want uint64, op func() error) {
		t.Helper()
		before := nc.Stats().OutMsgs
		if err := op(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := nc.Stats().OutMsgs - before; got != want {
			t.Errorf("%s sent %d requests, want %d", what, got, want)
		}
	}
	r := request("count", 10*time.Second)
	count("TryLock of a new key", 1, func() error { _, err := d.TryLock(ctx, r); return err })
	count("Refresh", 1, func() error { _, err := d.Refresh(ctx, r); return err })
	count("TryLock of a held key", 2, func() error {
		if _, err := d.TryLock(ctx, request("count", 10*time.Second)); err == nil {
			t.Error("TryLock of a held key succeeded")
		}
		return nil
	})
	count("Unlock", 1, func() error { return d.Unlock(ctx, r) })
	r = request("count", 10*time.Second)
	count("TryLock after its own release", 1, func() error { _, err := d.TryLock(ctx, r); return err })
	count("Unlock", 1, func() error { return d.Unlock(ctx, r) })
	// Another driver released it: the marker's revision is news here.
	h := request("count", 10*time.Second)
	if _, err := other.TryLock(ctx, h); err != nil {
		t.Fatal(err)
	}
	if err := other.Unlock(ctx, h); err != nil {
		t.Fatal(err)
	}
	count("TryLock after another's release", 3, func() error {
		_, err := d.TryLock(ctx, request("count", 10*time.Second))
		return err
	})
}

// TestTTLRoundsUp: the key's TTL is the lease's rounded up to whole
// seconds, the lease's validity the TTL asked for.
func TestTTLRoundsUp(t *testing.T) {
	c := testenv.StartNATS(t, 1)
	o := &natslock.Options{Bucket: randomBucket()}
	d := newDriver(t, c, o)
	ctx := ctxTimeout(t, 30*time.Second)
	js, err := jetstream.New(c.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "KV_"+o.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ttl  time.Duration
		want string
	}{{300 * time.Millisecond, "1"}, {time.Second, "1"}, {1500 * time.Millisecond, "2"}, {30 * time.Second, "30"}} {
		r := request("ttl", tc.ttl)
		start := time.Now()
		g, err := d.TryLock(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if g.Expires.After(time.Now().Add(tc.ttl)) || g.Expires.Before(start.Add(tc.ttl)) {
			t.Errorf("TTL %v: Expires %v from the start, want the TTL asked for", tc.ttl, g.Expires.Sub(start))
		}
		m, err := s.GetLastMsgForSubject(ctx, "$KV."+o.Bucket+".mutex.ttl")
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Header.Get(jetstream.MsgTTLHeader); got != tc.want {
			t.Errorf("TTL %v: the key's Nats-TTL is %q, want %q", tc.ttl, got, tc.want)
		}
		if err := d.Unlock(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
}

package redislock

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/driver"
)

// kindRequest returns a Request for name in mode, with a fresh owner.
func kindRequest(mode driver.Mode, name string, ttl time.Duration) driver.Request {
	r := request(name, ttl)
	r.Mode = mode
	switch mode {
	case driver.Permit:
		r.Limit = 1
	case driver.Leader:
		r.Value = "candidate-" + r.Owner[:8]
	}
	return r
}

func permitRequest(name string, limit int, ttl time.Duration) driver.Request {
	r := kindRequest(driver.Permit, name, ttl)
	r.Limit = limit
	return r
}

// mustLock takes r with TryLock and returns its token.
func mustLock(t *testing.T, d *Driver, r driver.Request) uint64 {
	t.Helper()
	g, err := d.TryLock(ctxTimeout(t, 5*time.Second), r)
	if err != nil {
		t.Fatalf("TryLock %s %q: %v", r.Mode, r.Name, err)
	}
	if g.Token == 0 {
		t.Fatalf("TryLock %s %q: token 0", r.Mode, r.Name)
	}
	return g.Token
}

// mustNotLock checks that TryLock of r fails with a *HeldError.
func mustNotLock(t *testing.T, d *Driver, r driver.Request) *driver.HeldError {
	t.Helper()
	_, err := d.TryLock(ctxTimeout(t, 5*time.Second), r)
	held, ok := errors.AsType[*driver.HeldError](err)
	if !ok || !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("TryLock %s %q: %v, want a *HeldError", r.Mode, r.Name, err)
	}
	return held
}

func mustUnlock(t *testing.T, d *Driver, r driver.Request) {
	t.Helper()
	if err := d.Unlock(ctxTimeout(t, 5*time.Second), r); err != nil {
		t.Fatalf("Unlock %s %q: %v", r.Mode, r.Name, err)
	}
}

// kindQueue returns the length of the wait queue of r's lock.
func kindQueue(t testing.TB, d *Driver, r driver.Request) int64 {
	t.Helper()
	n, err := d.client.LLen(ctxTimeout(t, 5*time.Second), d.keysFor(r)[2]).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitKindQueued waits until the queue of r's lock has n entries.
func waitKindQueued(t *testing.T, d *Driver, r driver.Request, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for kindQueue(t, d, r) != n {
		if time.Now().After(deadline) {
			t.Fatalf("queue of %s %q: %d, want %d", r.Mode, r.Name, kindQueue(t, d, r), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSupports(t *testing.T) {
	d := NewDriver(nilClient, nil)
	for _, m := range []driver.Mode{driver.Exclusive, driver.Read, driver.Write, driver.Permit, driver.Leader} {
		if !d.Supports(m) {
			t.Errorf("Supports(%s) = false", m)
		}
	}
	if d.Supports(driver.Mode(99)) {
		t.Error("Supports(99) = true")
	}
	ctx := ctxTimeout(t, time.Second)
	if _, err := d.TryLock(ctx, kindRequest(driver.Mode(99), "x", time.Second)); !errors.Is(err, driver.ErrUnsupported) {
		t.Errorf("TryLock of mode 99: %v, want ErrUnsupported", err)
	}
	if _, err := d.TryLock(ctx, permitRequest("x", 0, time.Second)); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("TryLock of a permit with limit 0: %v, want a limit error", err)
	}
}

// TestKindsAreSeparate: the mutex, readers-writer lock, semaphore and
// election of one name are four locks, each with its own tokens.
func TestKindsAreSeparate(t *testing.T) {
	d := newDriver(t, nil)
	name := "same/name"
	for _, m := range []driver.Mode{driver.Exclusive, driver.Write, driver.Permit, driver.Leader} {
		mustLock(t, d, kindRequest(m, name, 10*time.Second))
	}
	for _, m := range []driver.Mode{driver.Exclusive, driver.Read, driver.Permit, driver.Leader} {
		mustNotLock(t, d, kindRequest(m, name, 10*time.Second))
	}
	seen := map[string]bool{}
	for _, m := range []driver.Mode{driver.Exclusive, driver.Read, driver.Permit, driver.Leader} {
		for _, k := range d.keysFor(kindRequest(m, name, time.Second)) {
			if seen[k] {
				t.Errorf("key %q used by two kinds", k)
			}
			seen[k] = true
		}
	}
}

func TestKindKeysShareSlot(t *testing.T) {
	d := NewDriver(nilClient, &Options{Prefix: "app:"})
	for _, name := range []string{"a", "orders/42", strings.Repeat("n", 200)} {
		for _, m := range []driver.Mode{driver.Read, driver.Write, driver.Permit, driver.Leader} {
			k := d.keysFor(kindRequest(m, name, time.Second))
			want := map[driver.Mode]int{driver.Read: 6, driver.Write: 6, driver.Permit: 5, driver.Leader: 4}[m]
			if len(k) != want {
				t.Errorf("%s %q: %d keys, want %d", m, name, len(k), want)
			}
			for _, key := range k {
				if !strings.HasPrefix(key, "app:") || !strings.Contains(key, "{"+name+"}") {
					t.Errorf("%s key %q lacks the prefix or the tag {%s}", m, key, name)
				}
				if s := keySlot(key); s != crc16(name)%16384 {
					t.Errorf("%s key %q in slot %d, not the name's", m, key, s)
				}
			}
		}
		if c := d.electionChannel(name); keySlot(c) != crc16(name)%16384 {
			t.Errorf("election channel %q not in the name's slot", c)
		}
	}
	r := kindRequest(driver.Read, "orders/42", time.Second)
	if n := testing.AllocsPerRun(100, func() { _ = d.keysFor(r) }); n > 2 {
		t.Errorf("keysFor: %v allocations, want at most 2", n)
	}
}

// TestKindsOnCluster runs every kind on a one-node Redis Cluster, which
// rejects a script whose keys span slots.
func TestKindsOnCluster(t *testing.T) {
	c := startCluster(t)
	d := newDriverOn(t, c, nil)
	w := newDriverOn(t, c, &Options{Prefix: d.prefix})
	ctx := ctxTimeout(t, 30*time.Second)
	for _, m := range []driver.Mode{driver.Read, driver.Write, driver.Permit, driver.Leader} {
		name := "cluster/" + m.String()
		var ch <-chan driver.LeaderInfo
		if m == driver.Leader {
			var err error
			if ch, err = w.Observe(ctx, name); err != nil {
				t.Fatal(err)
			}
			next(t, ch, time.Second)
		}
		h := kindRequest(driver.Write, name, 10*time.Second)
		if m == driver.Permit || m == driver.Leader {
			h = kindRequest(m, name, 10*time.Second)
		}
		tok := mustLock(t, d, h)
		if _, err := d.Renew(ctx, h); err != nil {
			t.Fatal(err)
		}
		r := kindRequest(m, name, 10*time.Second)
		res := lockAsync(ctx, w, r)
		waitKindQueued(t, d, r, 1)
		mustUnlock(t, d, h)
		got := <-res
		if got.err != nil {
			t.Fatalf("%s: %v", m, got.err)
		}
		if got.g.Token <= tok {
			t.Errorf("%s: token %d after %d", m, got.g.Token, tok)
		}
		if m == driver.Leader {
			for info, _ := next(t, ch, time.Second); info.Token != got.g.Token; info, _ = next(t, ch, time.Second) {
			}
		}
		mustUnlock(t, w, r)
	}
}

// TestKindsAfterScriptFlush: every kind's script is loaded again when
// the server's script cache was flushed.
func TestKindsAfterScriptFlush(t *testing.T) {
	d := newDriver(t, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	for _, m := range []driver.Mode{driver.Read, driver.Write, driver.Permit, driver.Leader} {
		r := kindRequest(m, "flush/"+m.String(), 10*time.Second)
		mustLock(t, d, r)
		if err := d.client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Renew(ctx, r); err != nil {
			t.Fatalf("%s: Renew after SCRIPT FLUSH: %v", m, err)
		}
		if err := d.client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if m == driver.Leader {
			if info, err := d.Leader(ctx, r.Name); err != nil || info.Value != r.Value {
				t.Fatalf("Leader after SCRIPT FLUSH: %+v, %v", info, err)
			}
			if err := d.client.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		mustUnlock(t, d, r)
	}
}

// TestObserveAfterReconnect: a change made while the driver's pub/sub
// connection is down is seen once it subscribes again.
func TestObserveAfterReconnect(t *testing.T) {
	d := newDriver(t, nil)
	obs := newDriverOn(t, d.client, &Options{Prefix: d.prefix})
	ctx := ctxTimeout(t, 20*time.Second)
	name := "election/reconnect"
	ch, err := obs.Observe(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	next(t, ch, time.Second)
	topic := obs.electionChannel(name)
	waitSubscribed := func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			n, err := d.client.PubSubNumSub(ctx, topic).Result()
			if err != nil {
				t.Fatal(err)
			}
			if n[topic] == 1 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the observer is not subscribed")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitSubscribed()
	if err := d.client.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	r := kindRequest(driver.Leader, name, 10*time.Second)
	tok := mustLock(t, d, r)
	got, _ := next(t, ch, 5*time.Second)
	if got.Token != tok {
		t.Fatalf("observed %+v, want token %d", got, tok)
	}
	waitSubscribed()
	mustUnlock(t, d, r)
	if got, _ := next(t, ch, time.Second); got != (driver.LeaderInfo{}) {
		t.Fatalf("observed %+v after the resignation, want no leader", got)
	}
}

// nilClient is never used: key tests need a driver, not a server.
var nilClient = redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})

// crc16 is CRC-16/XMODEM, the checksum Redis Cluster maps keys to slots
// with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// keySlot is Redis Cluster's slot of key: the hash of its tag (the text
// between the first "{" and the next "}", if not empty) or of the key.
func keySlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key) % 16384
}

func TestCRC16(t *testing.T) {
	// The check value of CRC-16/XMODEM, and the example of the Redis
	// Cluster specification.
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16 = %#x, want 0x31c3", got)
	}
}

func TestKeysShareSlot(t *testing.T) {
	d := NewDriver(nilClient, &Options{Prefix: "app:"})
	names := []string{"a", "orders/42", "x.y-z_w:v@u+t=s", strings.Repeat("n", 200)}
	slots := map[uint16]bool{}
	for _, name := range names {
		k := d.keys(name)
		want := []string{"app:{" + name + "}", "app:{" + name + "}:fence", "app:{" + name + "}:q", "app:{" + name + "}:qe"}
		for i := range want {
			if k[i] != want[i] {
				t.Errorf("key %d of %q: %q, want %q", i, name, k[i], want[i])
			}
		}
		slot := keySlot(k[0])
		for _, key := range k[1:] {
			if s := keySlot(key); s != slot {
				t.Errorf("%q in slot %d, %q in slot %d", key, s, k[0], slot)
			}
		}
		if slot != crc16(name)%16384 {
			t.Errorf("%q: slot %d is not the slot of the name", k[0], slot)
		}
		slots[slot] = true
	}
	if len(slots) < 2 {
		t.Errorf("every name in one slot: locks would not spread over a cluster")
	}
}

func TestKeysAllocations(t *testing.T) {
	d := NewDriver(nilClient, nil)
	n := testing.AllocsPerRun(100, func() { _ = d.keys("orders/42") })
	if n > 2 {
		t.Errorf("keys: %v allocations, want at most 2", n)
	}
}

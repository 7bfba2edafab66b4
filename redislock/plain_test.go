package redislock

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// plainDriver returns a driver in LayoutRedsync on c with the options o
// (a prefix of the test's own unless o sets one), closed when the test
// ends, which also removes the counters dlock kept beside the test's
// keys.
func plainDriver(t testing.TB, c redis.UniversalClient, o Options) *Driver {
	t.Helper()
	o.Layout = LayoutRedsync
	if o.Prefix == "" {
		o.Prefix = testPrefix(t, c)
	}
	cleanPlainSide(t, c, o.Prefix)
	d := NewDriver(c, &o)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// cleanPlainSide removes, when t ends, dlock's counters beside the plain
// keys under prefix.
func cleanPlainSide(t testing.TB, c redis.UniversalClient, prefix string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, plainFenceHead+prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
}

// waitFollowing waits until d follows the channel of name's releases,
// confirmed: a call of d's waits for name, its first attempt failed.
func waitFollowing(t testing.TB, d *Driver, name string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		d.subs.mu.Lock()
		sub := d.subs.subs[d.plainChannel(name)]
		d.subs.mu.Unlock()
		if sub != nil && isClosed(sub.ready) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no waiter of %q subscribed within 5s", name)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestPlainKeys(t *testing.T) {
	names := []string{"a", "orders/42", "x.y-z_w:v@u+t=s", strings.Repeat("n", 200)}
	for _, prefix := range []string{"", "app:"} {
		d := NewDriver(nilClient, &Options{Layout: LayoutRedsync, Prefix: prefix})
		for _, name := range names {
			lock, fence := d.plainKeys(name)
			ch := d.plainChannel(name)
			if lock != prefix+name || fence != "dlock:fence:{"+prefix+name+"}" || ch != "dlock:released:{"+prefix+name+"}" {
				t.Errorf("keys of %q under %q: %q, %q, %q", name, prefix, lock, fence, ch)
			}
			// The untagged lock key hashes whole: the counter and the
			// channel, tagged with it, share its slot.
			if s := keySlot(lock); keySlot(fence) != s || keySlot(ch) != s || s != crc16(prefix+name)%16384 {
				t.Errorf("%q: slots %d, %d, %d", name, s, keySlot(fence), keySlot(ch))
			}
		}
	}
	if !strings.Contains(plainReleaseLua, "'"+plainChannelHead+"'") {
		t.Errorf("plain_release.lua does not publish on %q…", plainChannelHead)
	}
	d := NewDriver(nilClient, &Options{Layout: LayoutRedsync})
	if d.prefix != "" || d.pollInterval != DefaultPollInterval {
		t.Errorf("defaults: prefix %q, poll interval %v", d.prefix, d.pollInterval)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = d.plainKeys("orders/42") }); n > 2 {
		t.Errorf("plainKeys: %v allocations, want at most 2 (the keys' string and slice)", n)
	}
	defer func() {
		if recover() == nil {
			t.Error("NewDriver with Layout \"redlock\" did not panic")
		}
	}()
	NewDriver(nilClient, &Options{Layout: "redlock"})
}

// TestPlainFormat: the lock is the plain key holding the owner value with
// the lease's TTL, beside a counter of dlock's; renew and release are
// owner-checked, and a key holding another value is never extended or
// removed. Tokens increase across dlock's grants of a name; a peer's grant
// in between leaves the counter where it was.
func TestPlainFormat(t *testing.T) {
	c := testenv.RedisClient(t)
	d := plainDriver(t, c, Options{})
	ctx := ctxTimeout(t, 20*time.Second)
	t.Run("Keys", func(t *testing.T) { plainFormat(t, ctx, c, d, "format") })
	t.Run("Tokens", func(t *testing.T) { plainTokens(t, ctx, c, d, "tokens") })
}

func plainFormat(t *testing.T, ctx context.Context, c *redis.Client, d *Driver, name string) {
	lock, fence := d.plainKeys(name)
	r := request(name, 2*time.Second)
	g, err := d.TryLock(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if v := c.Get(ctx, lock).Val(); v != r.Owner {
		t.Errorf("%q holds %q, want the owner value %q", lock, v, r.Owner)
	}
	if typ := c.Type(ctx, lock).Val(); typ != "string" {
		t.Errorf("%q is a %s, want a string", lock, typ)
	}
	if pttl := c.PTTL(ctx, lock).Val(); pttl <= 0 || pttl > 2*time.Second {
		t.Errorf("%q PTTL %v, want within the 2s TTL", lock, pttl)
	}
	if tok, _ := c.Get(ctx, fence).Uint64(); tok != g.Token {
		t.Errorf("counter %q at %d, the grant's token is %d", fence, tok, g.Token)
	}
	if _, err := d.Renew(ctx, request(name, time.Minute)); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("renew by another owner: %v, want ErrNotHeld", err)
	}
	if err := d.Unlock(ctx, request(name, time.Minute)); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("unlock by another owner: %v, want ErrNotHeld", err)
	}
	if pttl := c.PTTL(ctx, lock).Val(); pttl > 2*time.Second {
		t.Errorf("another owner's renew extended the lock to %v", pttl)
	}
	r.TTL = 30 * time.Second
	if _, err := d.Renew(ctx, r); err != nil {
		t.Fatal(err)
	}
	if pttl := c.PTTL(ctx, lock).Val(); pttl <= 2*time.Second {
		t.Errorf("renew left PTTL %v, want up to 30s", pttl)
	}
	if err := d.Unlock(ctx, r); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, lock).Val(); n != 0 {
		t.Errorf("%q still exists after the release", lock)
	}
	// A peer's key (another value) is held: TryLock reports its TTL and
	// leaves it as it is.
	c.Set(ctx, lock, "peer-value", 5*time.Second)
	_, err = d.TryLock(ctx, request(name, time.Second))
	var held *driver.HeldError
	if !errors.As(err, &held) || held.Remaining <= 0 || held.Remaining > 5*time.Second {
		t.Errorf("TryLock over a peer's key: %v, want a HeldError with up to 5s left", err)
	}
	if v := c.Get(ctx, lock).Val(); v != "peer-value" {
		t.Errorf("peer's key now holds %q", v)
	}
}

func plainTokens(t *testing.T, ctx context.Context, c *redis.Client, d *Driver, name string) {
	lock, _ := d.plainKeys(name)
	var last uint64
	for i := range 5 {
		r := request(name, time.Second)
		g, err := d.TryLock(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && g.Token != last+1 {
			t.Errorf("grant %d: token %d after %d, want the next one", i, g.Token, last)
		}
		last = g.Token
		if err := d.Unlock(ctx, r); err != nil {
			t.Fatal(err)
		}
		// A peer takes and releases the lock: SET NX PX, then its DEL.
		if ok := c.SetNX(ctx, lock, "peer-"+randomHex(8), time.Second).Val(); !ok {
			t.Fatal("the peer's SET NX failed on a free lock")
		}
		c.Del(ctx, lock)
	}
}

func TestPlainUnsupportedKinds(t *testing.T) {
	c := testenv.RedisClient(t)
	d := plainDriver(t, c, Options{})
	l, err := dlock.New(d)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 10*time.Second)
	for _, m := range []driver.Mode{driver.Read, driver.Write, driver.Permit, driver.Leader} {
		if l.Supports(m) {
			t.Errorf("Supports(%v) in layout=redsync", m)
		}
	}
	if !l.Supports(driver.Exclusive) {
		t.Error("no mutex in layout=redsync")
	}
	attempts := map[string]func() error{
		"AcquireRead":  func() error { _, err := l.AcquireRead(ctx, "k"); return err },
		"AcquireWrite": func() error { _, err := l.TryAcquireWrite(ctx, "k"); return err },
		"AcquirePermit": func() error {
			_, err := l.AcquirePermit(ctx, "k", 2)
			return err
		},
		"Campaign": func() error { _, err := l.TryCampaign(ctx, "k", "v"); return err },
		"Leader":   func() error { _, err := l.Leader(ctx, "k"); return err },
		"Observe":  func() error { _, err := l.Observe(ctx, "k"); return err },
		"driver TryLock": func() error {
			r := request("k", time.Second)
			r.Mode = driver.Read
			_, err := d.TryLock(ctx, r)
			return err
		},
		"driver Observe": func() error { _, err := d.Observe(ctx, "k"); return err },
	}
	for what, attempt := range attempts {
		err := attempt()
		if !errors.Is(err, dlock.ErrUnsupported) || !strings.Contains(err.Error(), "layout=redsync") {
			t.Errorf("%s: %v, want ErrUnsupported naming layout=redsync", what, err)
		}
	}
}

// TestPlainWaiting: a waiter takes the lock soon after a foreign DEL of
// the key (a peer's release, which announces nothing), within the poll
// interval; after a dlock release, by its message, long before any poll;
// and when a crashed holder's TTL runs out, at that moment.
func TestPlainWaiting(t *testing.T) {
	c := testenv.RedisClient(t)
	ctx := ctxTimeout(t, 60*time.Second)

	t.Run("ForeignDel", func(t *testing.T) {
		d := plainDriver(t, c, Options{PollInterval: 200 * time.Millisecond})
		lock, _ := d.plainKeys("del")
		c.Set(ctx, lock, "peer-value", time.Minute)
		res := lockAsync(ctx, d, request("del", 10*time.Second))
		waitFollowing(t, d, "del")
		time.Sleep(50 * time.Millisecond)
		deleted := time.Now()
		c.Del(ctx, lock)
		got := <-res
		if got.err != nil {
			t.Fatal(got.err)
		}
		// A foreign DEL announces nothing: only a poll can find the key
		// gone. Polls come at most 1.5 × 200ms apart; ten times that only
		// bounds a hang.
		if lat := got.at.Sub(deleted); lat > 10*300*time.Millisecond {
			t.Errorf("the waiter took the lock %v after the peer's DEL, want it found by a poll (every 300ms at most)", lat)
		} else {
			t.Logf("taken %v after the peer's DEL", lat)
		}
	})

	t.Run("DlockRelease", func(t *testing.T) {
		// Polls so rare that only the release's message explains a quick
		// take-over.
		d := plainDriver(t, c, Options{PollInterval: time.Minute})
		w := plainDriver(t, c, Options{Prefix: d.prefix, PollInterval: time.Minute})
		h := request("rel", 30*time.Second)
		g, err := d.TryLock(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		res := lockAsync(ctx, w, request("rel", 10*time.Second))
		waitFollowing(t, w, "rel")
		time.Sleep(20 * time.Millisecond) // the attempt after the confirmation has failed
		wg, lat := unlockThenLock(t, d, h, res)
		if lat > messageBound {
			t.Errorf("taken %v after a dlock release, with polls a minute apart: want by its message", lat)
		} else {
			t.Logf("taken %v after a dlock release", lat)
		}
		if wg.Token <= g.Token {
			t.Errorf("token %d after %d", wg.Token, g.Token)
		}
		w.subs.mu.Lock()
		left := len(w.subs.subs)
		w.subs.mu.Unlock()
		if left != 0 {
			t.Errorf("%d subscriptions left after the wait", left)
		}
	})

	t.Run("HolderExpires", func(t *testing.T) {
		d := plainDriver(t, c, Options{PollInterval: time.Minute})
		lock, _ := d.plainKeys("exp")
		set := time.Now() // before the SET: the key cannot expire before set+700ms
		c.Set(ctx, lock, "crashed-peer", 700*time.Millisecond)
		got := <-lockAsync(ctx, d, request("exp", 10*time.Second))
		if got.err != nil {
			t.Fatal(got.err)
		}
		// Polls are a minute apart: a take-over within messageBound of the
		// expiry came from the timer set to the key's known expiry.
		if lat := got.at.Sub(set); lat < 650*time.Millisecond || lat > 700*time.Millisecond+messageBound {
			t.Errorf("taken %v after a 700ms key was set, want at its expiry", lat)
		}
	})

	t.Run("Cancel", func(t *testing.T) {
		d := plainDriver(t, c, Options{})
		lock, _ := d.plainKeys("cancel")
		c.Set(ctx, lock, "peer-value", time.Minute)
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		if _, err := d.Lock(wctx, request("cancel", time.Second)); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Lock past its deadline: %v", err)
		}
		if v := c.Get(ctx, lock).Val(); v != "peer-value" {
			t.Errorf("the peer's key holds %q after a cancelled wait", v)
		}
	})
}

// TestPlainURL: layout=redsync opens a Locker whose lock is the bare name
// (the layout's default prefix is empty), or the prefix and the name;
// bad values are *dlock.ParamError naming the parameter.
func TestPlainURL(t *testing.T) {
	addr := testenv.RedisAddr(t)
	c := testenv.RedisClient(t)
	ctx := ctxTimeout(t, 20*time.Second)
	name := "dlocktest-" + randomHex(6) + "/bare"
	cleanPlainSide(t, c, name)
	for url, key := range map[string]string{
		"redis://" + addr + "?layout=redsync":                                       name,
		"redis://" + addr + "?layout=redsync&prefix=":                               name,
		"redis://" + addr + "?layout=redsync&prefix=app:&poll_interval=20ms":        "app:" + name,
		"redis://" + addr + "/0?layout=redsync&fence_ttl=1h&wait_timeout=1s&ttl=2s": name,
	} {
		l, err := dlock.Open(ctx, url)
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		lease, err := l.TryAcquire(ctx, name)
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		v := c.Get(ctx, key).Val()
		if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(v) {
			t.Errorf("%s: key %q holds %q, want an owner value", url, key, v)
		}
		if err := lease.Release(ctx); err != nil {
			t.Error(err)
		}
		_ = l.Close()
	}
	cleanPlainSide(t, c, "app:"+name)
	for _, bad := range []struct{ query, param string }{
		{"layout=redlock", "layout"},
		{"layout=", "layout"},
		{"layout=redsync&prefix=a{b}", "prefix"},
		{"layout=redsync&queue_ttl=1s", "queue_ttl"},
		{"layout=redsync&poll_interval=0s", "poll_interval"},
		{"layout=redsync&poll_interval=often", "poll_interval"},
		{"poll_interval=100ms", "poll_interval"},
		{"layout=dlock&prefix=", "prefix"},
	} {
		locktest.OpenFails(t, ctx, "redis://"+addr+"?"+bad.query, bad.param)
	}
}

// TestPlainConformance runs dlock's conformance suite in layout=redsync.
func TestPlainConformance(t *testing.T) {
	addr := testenv.RedisAddr(t)
	admin := testenv.RedisClient(t)
	prefix := testPrefix(t, admin)
	cleanPlainSide(t, admin, prefix)
	conform(t, admin, LayoutRedsync, prefix, func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
		return ownClientLocker(t, &redis.Options{Addr: addr}, &Options{Layout: LayoutRedsync, Prefix: prefix}, opts...)
	})
}

// plainACL is the ACL of the package documentation's Securing the store
// for layout=redsync, with the test's own patterns: the plain keys under
// prefix, dlock's counters beside them and the release channels.
func plainACL(prefix string) []string {
	return []string{"~" + prefix + "*", "~" + plainFenceHead + prefix + "*", "&" + plainChannelHead + prefix + "*",
		"+ping", "+evalsha", "+eval", "+subscribe", "+unsubscribe", "+ssubscribe", "+sunsubscribe",
		"+time", "+get", "+set", "+del", "+incr", "+pexpire", "+pttl", "+publish", "+spublish", "+scan"}
}

// TestPlainACL runs the conformance suite in layout=redsync as an ACL
// user allowed only what the documentation lists, and checks that the
// user cannot lock outside its patterns.
func TestPlainACL(t *testing.T) {
	addr := testenv.RedisAddr(t)
	admin := testenv.RedisClient(t)
	prefix := testPrefix(t, admin)
	cleanPlainSide(t, admin, prefix)
	user, pw := "dlocktest-"+randomHex(6), randomHex(12)
	args := append([]any{"ACL", "SETUSER", user, "on", ">" + pw}, anySlice(plainACL(prefix))...)
	if err := admin.Do(t.Context(), args...).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", user) })
	open := func(t *testing.T, prefix string, opts ...dlock.Option) *dlock.Locker {
		return ownClientLocker(t, &redis.Options{Addr: addr, Username: user, Password: pw},
			&Options{Layout: LayoutRedsync, Prefix: prefix}, opts...)
	}
	conform(t, admin, LayoutRedsync, prefix, func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
		return open(t, prefix, opts...)
	})
	l := open(t, "other:")
	defer l.Close()
	if _, err := l.TryAcquire(t.Context(), "x"); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("TryAcquire outside the user's key pattern: %v, want a NOPERM error", err)
	}
}

func anySlice(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

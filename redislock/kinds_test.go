package redislock

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

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
		if _, err := d.Refresh(ctx, h); err != nil {
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
		if _, err := d.Refresh(ctx, r); err != nil {
			t.Fatalf("%s: Refresh after SCRIPT FLUSH: %v", m, err)
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

// fullPathOnly returns the script of a kind (its file, rw.lua say)
// without its fast paths: what follows its "-- @lib" line, with the
// shared code in place of the line.
func fullPathOnly(t *testing.T, src string) string {
	t.Helper()
	at := strings.Index(src, "\n-- @lib\n")
	if at < 0 {
		t.Fatal("script without a -- @lib line")
	}
	return withKindsLib(src[at:])
}

// pathStep is one call of a kind's script in TestKindFastPaths.
type pathStep struct {
	who   int         // which request
	mode  driver.Mode // Read or Write for a readers-writer lock, else the kind's
	op    any         // opTry, opWait, opRefresh or opRelease
	ttl   time.Duration
	sleep time.Duration // after the call
}

// kindState is what a kind's keys hold, with the tokens made relative to
// the first one granted (the counters are seeded from the clock) and the
// expiries kept apart to be compared within a tolerance.
type kindState struct {
	types  []string
	values []map[string]string  // members, fields, elements, the counter
	times  []map[string]float64 // expiry scores and PTTLs, in ms from now
}

// TestKindFastPaths: every kind's script, with its written-out fast paths,
// leaves the keys and replies as its full path alone does, over sequences
// that take the fast paths and that fall through them (someone in the
// way, a queue, a holder already holding, a holder whose lease expired).
func TestKindFastPaths(t *testing.T) {
	d := newDriver(t, nil)
	// Refreshes use another TTL than acquisitions, so that one that
	// extends nothing shows.
	const long, longer = 10 * time.Second, 20 * time.Second
	const short, pause = 60 * time.Millisecond, 120 * time.Millisecond
	R, W := driver.Read, driver.Write
	cases := []struct {
		name  string
		mode  driver.Mode
		limit int
		steps []pathStep
	}{
		{"rw", driver.Read, 0, []pathStep{
			{0, R, opTry, long, 0}, {0, R, opTry, long, 0}, {1, R, opWait, long, 0},
			{2, W, opTry, long, 0}, {2, W, opWait, long, 0}, {3, R, opTry, long, 0},
			{0, R, opRefresh, longer, 0}, {3, R, opRefresh, longer, 0},
			{0, R, opRelease, long, 0}, {1, R, opRelease, long, 0},
			{2, W, opRefresh, longer, 0}, {2, W, opTry, long, 0}, {0, R, opTry, long, 0},
			{1, W, opTry, long, 0}, {3, W, opRelease, long, 0}, {2, W, opRelease, long, 0},
			{2, W, opRelease, long, 0}, {2, W, opRefresh, longer, 0},
			// Readers whose leases expired beside live ones.
			{3, R, opTry, long, 0}, {0, R, opTry, short, pause}, {1, R, opTry, long, 0},
			{0, R, opTry, short, pause}, {0, R, opRefresh, longer, 0}, {0, R, opRelease, long, 0},
			{0, R, opTry, short, pause}, {0, R, opRelease, long, 0},
			{2, R, opTry, short, pause}, {1, R, opRelease, long, 0},
			{2, R, opTry, short, pause}, {3, R, opRefresh, longer, 0},
			{2, W, opTry, long, 0}, {1, R, opRelease, long, 0}, {3, R, opRelease, long, 0},
			{2, W, opWait, long, 0}, {2, W, opRelease, long, 0},
			{3, R, opTry, short, pause}, {0, W, opTry, long, 0}, {0, W, opRelease, long, 0},
		}},
		{"semaphore", driver.Permit, 2, []pathStep{
			{0, 0, opTry, long, 0}, {1, 0, opWait, long, 0}, {2, 0, opTry, long, 0},
			{0, 0, opTry, long, 0}, {2, 0, opWait, long, 0}, {0, 0, opRefresh, longer, 0},
			{3, 0, opRefresh, longer, 0}, {0, 0, opRelease, long, 0}, {2, 0, opRefresh, longer, 0},
			{1, 0, opRelease, long, 0}, {1, 0, opRelease, long, 0}, {2, 0, opRelease, long, 0},
			// Holders whose leases expired beside live ones.
			{0, 0, opTry, long, 0}, {3, 0, opTry, short, pause}, {1, 0, opTry, long, 0},
			{3, 0, opRefresh, longer, 0}, {3, 0, opRelease, long, 0}, {1, 0, opRelease, long, 0},
			{3, 0, opTry, short, pause}, {3, 0, opRelease, long, 0},
			{2, 0, opTry, short, pause}, {0, 0, opRefresh, longer, 0},
			{2, 0, opTry, short, pause}, {0, 0, opRelease, long, 0},
			{1, 0, opTry, long, 0}, {2, 0, opTry, short, pause}, {3, 0, opTry, long, 0},
			{0, 0, opTry, long, 0}, {1, 0, opRelease, long, 0}, {3, 0, opRelease, long, 0},
			{0, 0, opRelease, long, 0},
		}},
		{"election", driver.Leader, 0, []pathStep{
			{0, 0, opTry, long, 0}, {1, 0, opTry, long, 0}, {0, 0, opWait, long, 0},
			{1, 0, opWait, long, 0}, {0, 0, opRefresh, longer, 0}, {1, 0, opRefresh, longer, 0},
			{0, 0, opRelease, long, 0}, {1, 0, opRefresh, longer, 0}, {1, 0, opRelease, long, 0},
			{1, 0, opRelease, long, 0}, {2, 0, opTry, short, pause}, {0, 0, opTry, long, 0},
			{2, 0, opRelease, long, 0}, {0, 0, opRelease, long, 0},
		}},
	}
	ctx := ctxTimeout(t, 30*time.Second)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			owners := make([]driver.Request, 4)
			for i := range owners {
				owners[i] = kindRequest(c.mode, "", long)
				owners[i].Limit = max(c.limit, 1)
			}
			// Each step runs the fast script on one name, then the full
			// path alone on another, and compares.
			var base [2]int64
			for i, s := range c.steps {
				var replies [2]string
				var states [2]kindState
				for side, name := range []string{"fast/" + c.name, "full/" + c.name} {
					r := owners[s.who]
					r.Name, r.TTL = name, s.ttl
					if c.mode == driver.Read {
						r.Mode = s.mode
					}
					script, args := d.kindCall(r, s.op, d.ttlArgs(s.ttl))
					src := script.Source()
					if side == 1 {
						src = fullPathOnly(t, map[driver.Mode]string{driver.Read: rwLua,
							driver.Permit: semaphoreLua, driver.Leader: electionLua}[c.mode])
					}
					res, err := d.client.Eval(ctx, src, d.keysFor(r), args...).Result()
					if err != nil {
						t.Fatalf("step %d (%+v), side %d: %v", i, s, side, err)
					}
					if _, ok := res.(int64); i == 0 && side == 0 && !ok {
						t.Fatalf("first grant: %v, want the bare token of the fast path", res)
					}
					replies[side] = pathReply(res, &base[side], s.op)
					states[side] = readKindState(t, d, d.keysFor(r), base[side])
				}
				if replies[0] != replies[1] {
					t.Fatalf("step %d (%+v): reply %s, the full path's %s", i, s, replies[0], replies[1])
				}
				compareKindStates(t, i, states[0], states[1])
				time.Sleep(s.sleep)
			}
		})
	}
}

// pathReply describes a script's reply with its tokens relative to base,
// which the first token granted sets (to one below it).
func pathReply(res any, base *int64, op any) string {
	rel := func(tok int64) int64 {
		if *base == 0 {
			*base = tok - 1
		}
		return tok - *base
	}
	if op == opRefresh || op == opRelease {
		return fmt.Sprint(res)
	}
	switch v := res.(type) {
	case int64:
		return fmt.Sprintf("granted %d", rel(v))
	case []any:
		if len(v) == 2 && v[0] == int64(1) {
			return fmt.Sprintf("granted %d", rel(v[1].(int64)))
		}
		if len(v) == 3 {
			counter := v[2].(int64)
			if counter != 0 {
				counter -= *base
			}
			return fmt.Sprintf("held, counter %d", counter)
		}
	}
	return fmt.Sprintf("unexpected %v", res)
}

// readKindState reads keys (as from keysFor), tokens made relative to base.
func readKindState(t *testing.T, d *Driver, keys []string, base int64) kindState {
	t.Helper()
	ctx := ctxTimeout(t, 5*time.Second)
	now, err := d.client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	nowMS := float64(now.UnixMilli())
	relToken := func(s string) string {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || base == 0 {
			return s
		}
		return strconv.FormatInt(n-base, 10)
	}
	var st kindState
	for i, k := range keys {
		typ := d.client.Type(ctx, k).Val()
		values, times := map[string]string{}, map[string]float64{}
		if pttl := d.client.PTTL(ctx, k).Val(); pttl > 0 {
			times["pttl"] = float64(pttl.Milliseconds())
		}
		switch typ {
		case "string": // the counter
			values["value"] = relToken(d.client.Get(ctx, k).Val())
		case "zset":
			for _, z := range d.client.ZRangeWithScores(ctx, k, 0, -1).Val() {
				times[z.Member.(string)] = z.Score - nowMS
			}
		case "hash":
			for f, v := range d.client.HGetAll(ctx, k).Val() {
				switch {
				case i == 3: // queue entries: the deadline is a time
					deadline, rest, _ := strings.Cut(v, " ")
					ms, _ := strconv.ParseFloat(deadline, 64)
					times["entry "+f] = ms - nowMS
					values[f] = rest
				case f == "t" || i == 4: // tokens of the holder, of the holders
					values[f] = relToken(v)
				default:
					values[f] = v
				}
			}
		case "list":
			for j, v := range d.client.LRange(ctx, k, 0, -1).Val() {
				values[strconv.Itoa(j)] = v
			}
		}
		st.types = append(st.types, typ)
		st.values = append(st.values, values)
		st.times = append(st.times, times)
	}
	return st
}

// compareKindStates fails unless a and b agree, their times within a
// second (the two were read at different moments of a busy machine; a
// refresh that extended nothing is 10s off).
func compareKindStates(t *testing.T, step int, a, b kindState) {
	t.Helper()
	for i := range a.types {
		if a.types[i] != b.types[i] || !maps.Equal(a.values[i], b.values[i]) {
			t.Fatalf("step %d, key %d: %s %v, the full path's %s %v", step, i, a.types[i], a.values[i], b.types[i], b.values[i])
		}
		if len(a.times[i]) != len(b.times[i]) {
			t.Fatalf("step %d, key %d: times %v, the full path's %v", step, i, a.times[i], b.times[i])
		}
		for k, v := range a.times[i] {
			w, ok := b.times[i][k]
			if !ok || math.Abs(v-w) > 1000 {
				t.Fatalf("step %d, key %d: %s at %.0fms, the full path's %v", step, i, k, v, b.times[i])
			}
		}
	}
}

package redlock

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

// tryLock is TryLock, tried again (up to 3 times) when too few nodes
// answered in time: on a loaded machine that happens, and no token is
// issued then.
func tryLock(t *testing.T, d *Driver, r driver.Request) (driver.Grant, error) {
	t.Helper()
	for i := 1; ; i++ {
		g, err := d.TryLock(t.Context(), r)
		if i == 3 || !errors.Is(err, dlock.ErrNoQuorum) {
			return g, err
		}
		t.Logf("attempt %d: %v; trying again", i, err)
	}
}

// takeTurns takes and releases name n times, in turn from the drivers,
// and appends each token to *got.
func takeTurns(t *testing.T, ds []*Driver, name string, n int, got *[]uint64) {
	t.Helper()
	ctx := t.Context()
	for range n {
		d := ds[len(*got)%len(ds)]
		r := driver.Request{Name: name, Owner: newOwner(), TTL: 5 * time.Second}
		g, err := tryLock(t, d, r)
		if err != nil {
			t.Fatalf("acquisition %d: %v", len(*got), err)
		}
		*got = append(*got, g.Token)
		if err := d.Unlock(ctx, r); err != nil {
			t.Fatalf("release %d: %v", len(*got)-1, err)
		}
	}
}

func checkIncreasing(t *testing.T, tokens []uint64) {
	t.Helper()
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Errorf("token #%d = %d is not greater than #%d = %d", i, tokens[i], i-1, tokens[i-1])
		}
	}
}

// Tokens strictly increase across acquisitions while nodes restart
// without persistence (losing their counters) one at a time, two at once,
// and while different subsets of nodes are down.
func TestTokensAcrossRestarts(t *testing.T) {
	c := newCluster(t, 5)
	h := &fenceHook{}
	ds := []*Driver{c.hookedDriver(t, h), c.hookedDriver(t, h), c.hookedDriver(t, h)}
	name := uniqueName("restarts")
	var tokens []uint64
	step := func(what string, action func()) {
		action()
		before := len(tokens)
		takeTurns(t, ds, name, 6, &tokens)
		t.Logf("%-28s tokens %d..%d", what, tokens[before], tokens[len(tokens)-1])
	}
	step("all up", func() {})
	for i := range 5 {
		step("restart node "+strconv.Itoa(i), func() { c.servers[i].Restart() })
	}
	step("restart nodes 1 and 3", func() { c.kill(1, 3); c.start(1, 3) })
	step("restart nodes 0 and 4", func() { c.kill(0, 4); c.start(0, 4) })
	step("nodes 0, 1 down", func() { c.kill(0, 1) })
	step("0, 1 back empty; 3, 4 down", func() { c.start(0, 1); c.kill(3, 4) })
	step("3, 4 back empty; 1, 2 down", func() { c.start(3, 4); c.kill(1, 2) })
	step("1, 2 back empty; 0 down", func() { c.start(1, 2); c.kill(0) })
	step("all up", func() { c.start(0) })
	// Every node restarted at once: nothing but the nodes' clocks keeps
	// the tokens increasing now (see docs/REDLOCK.md).
	step("restart all five", func() { c.kill(0, 1, 2, 3, 4); c.start(0, 1, 2, 3, 4) })
	checkIncreasing(t, tokens)
	wb := h.phase2()
	if wb == 0 {
		t.Error("no acquisition needed phase 2, though restarted nodes reseed their counters")
	}
	t.Logf("%d acquisitions, %d with phase 2", len(tokens), wb)
}

// Phase 2 runs when the quorum's counters differ and raises them all to
// the token; when they agree, it is skipped.
func TestPhase2(t *testing.T) {
	c := newCluster(t, 5)
	ctx := t.Context()
	h := &fenceHook{}
	d := c.hookedDriver(t, h)
	name := uniqueName("phase2")
	fence := DefaultPrefix + "{" + name + "}:fence"
	counters := func() []string {
		out := make([]string, len(c.admin))
		for i, a := range c.admin {
			out[i], _ = a.Get(ctx, fence).Result()
		}
		return out
	}
	var tokens []uint64
	tokens = append(tokens, take(t, d, name)) // first use: five seeds from five clocks
	if n := h.phase2(); n != 1 {
		t.Errorf("first acquisition: %d write-backs, want 1 (the seeds differ)", n)
	}
	tokens = append(tokens, take(t, d, name))
	if n := h.phase2(); n != 1 {
		t.Errorf("second acquisition: %d write-backs, want still 1 (the counters agree)", n)
	}

	// One node far ahead, and needed for the quorum because two others
	// are down: its value wins and is written back to the other two. (With
	// all five up, four nodes that agree make a quorum on their own, and
	// the acquisition does not wait for the fifth.)
	c.kill(0, 1)
	big := uint64(time.Now().UnixMicro()) + 1e12
	if err := c.admin[2].Set(ctx, fence, big, 0).Err(); err != nil {
		t.Fatal(err)
	}
	tokens = append(tokens, take(t, d, name))
	if got, want := tokens[len(tokens)-1], big+1; got != want {
		t.Errorf("token = %d, want %d (the largest counter + 1)", got, want)
	}
	if n := h.phase2(); n != 2 {
		t.Errorf("%d write-backs, want 2", n)
	}
	want := strconv.FormatUint(big+1, 10)
	if got := counters(); got[2] != want || got[3] != want || got[4] != want {
		t.Errorf("counters after phase 2 = %q, want %s on the live nodes 2, 3, 4", got, want)
	}

	// One node behind (as after a reseed from a slow clock): it catches up.
	if err := c.admin[4].Set(ctx, fence, 5, 0).Err(); err != nil {
		t.Fatal(err)
	}
	tokens = append(tokens, take(t, d, name))
	if n := h.phase2(); n != 3 {
		t.Errorf("%d write-backs, want 3", n)
	}
	last := strconv.FormatUint(tokens[len(tokens)-1], 10)
	if got := counters(); got[2] != last || got[3] != last || got[4] != last {
		t.Errorf("counters = %q, want the last token %s on the live nodes 2, 3, 4", got, last)
	}
	checkIncreasing(t, tokens)
}

// Why phase 2 is needed: quorum {0,1,2} sees node 0 far ahead, so the
// token comes from node 0 alone; the next quorum {2,3,4} does not include
// node 0. Only the write-back to node 2 carries the token over. Without
// phase 2 (the broken variant) the next token goes backwards, which shows
// that the test can tell.
func TestPhase2CarriesTokenAcrossQuorums(t *testing.T) {
	for _, broken := range []bool{false, true} {
		t.Run(map[bool]string{false: "with phase 2", true: "without phase 2"}[broken], func(t *testing.T) {
			c := newCluster(t, 5)
			ctx := t.Context()
			d := c.hookedDriver(t, &fenceHook{skip: broken})
			name := uniqueName("carry")
			c.kill(3, 4)
			big := uint64(time.Now().UnixMicro()) + 1e12
			if err := c.admin[0].Set(ctx, DefaultPrefix+"{"+name+"}:fence", big, 0).Err(); err != nil {
				t.Fatal(err)
			}
			t1 := take(t, d, name) // quorum {0,1,2}
			c.start(3, 4)
			c.kill(0, 1)
			t2 := take(t, d, name) // quorum {2,3,4}
			if broken {
				if t2 > t1 {
					t.Errorf("without phase 2: tokens %d then %d; expected the second to go backwards", t1, t2)
				}
				return
			}
			if t2 <= t1 {
				t.Errorf("tokens %d then %d: not increasing", t1, t2)
			}
		})
	}
}

// fenceHook is a go-redis hook on a Driver's clients that sees its
// phase-2 script calls: it records the token each writes back, and with
// fail set fails them, with skip set answers them done unsent (as if
// phase 2 were left out).
type fenceHook struct {
	fail, skip bool
	mu         sync.Mutex
	tokens     map[any]bool
}

// phase2 returns how many acquisitions ran phase 2 (distinct tokens
// written back) so far.
func (h *fenceHook) phase2() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.tokens)
}

func (h *fenceHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *fenceHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.intercept(cmd) {
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

func (h *fenceHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		rest := cmds[:0:0]
		for _, cmd := range cmds {
			if !h.intercept(cmd) {
				rest = append(rest, cmd)
			}
		}
		if len(rest) == 0 {
			return nil
		}
		return next(ctx, rest)
	}
}

// intercept records cmd's token if it runs the phase-2 script, and
// reports whether it answered cmd itself.
func (h *fenceHook) intercept(cmd redis.Cmder) bool {
	a := cmd.Args() // evalsha sha 2 lock fence owner token fence_ttl
	if len(a) != 8 || (a[1] != fenceScript.Hash() && a[1] != fenceLua) {
		return false
	}
	h.mu.Lock()
	if h.tokens == nil {
		h.tokens = map[any]bool{}
	}
	h.tokens[a[6]] = true
	h.mu.Unlock()
	switch {
	case h.fail:
		cmd.SetErr(errors.New("injected failure"))
	case h.skip:
		cmd.(*redis.Cmd).SetVal(int64(1))
	default:
		return false
	}
	return true
}

// hookedDriver returns a Driver whose clients report to h (those of the
// nodes listed, or all).
func (c *cluster) hookedDriver(t *testing.T, h *fenceHook, nodes ...int) *Driver {
	t.Helper()
	cs := c.clients(t)
	if nodes == nil {
		nodes = []int{0, 1, 2, 3, 4}[:len(cs)]
	}
	for _, i := range nodes {
		cs[i].(*redis.Client).AddHook(h)
	}
	d, err := NewDriver(cs, testOptions(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	prepare(t, d)
	return d
}

// take takes and releases name once, and returns the token.
func take(t *testing.T, d *Driver, name string) uint64 {
	t.Helper()
	r := driver.Request{Name: name, Owner: newOwner(), TTL: 5 * time.Second}
	g, err := tryLock(t, d, r)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	if err := d.Unlock(t.Context(), r); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	return g.Token
}

// When phase 2 misses its quorum the acquisition fails, and the lock is
// removed from every node.
func TestPhase2WithoutQuorum(t *testing.T) {
	c := newCluster(t, 5)
	ctx := t.Context()
	d := c.hookedDriver(t, &fenceHook{fail: true}, 0, 1, 2)
	name := uniqueName("phase2fail")
	r := driver.Request{Name: name, Owner: newOwner(), TTL: 5 * time.Second}
	_, err := d.TryLock(ctx, r) // first use: the seeds differ, so phase 2 runs
	if !errors.Is(err, dlock.ErrNoQuorum) {
		t.Fatalf("TryLock with phase 2 failing on 3 of 5 nodes = %v, want ErrNoQuorum", err)
	}
	if got := c.owners(name); countOf(got, "") != 5 {
		t.Errorf("lock on the nodes = %q, want it removed everywhere", got)
	}
}

// With fencing off, tokens are 0 and no counter is kept.
func TestNoFencing(t *testing.T) {
	c := newCluster(t, 3)
	ctx := t.Context()
	d := c.driver(t, &Options{NoFencing: true})
	name := uniqueName("nofence")
	r := driver.Request{Name: name, Owner: newOwner(), TTL: time.Second}
	g, err := tryLock(t, d, r)
	if err != nil {
		t.Fatal(err)
	}
	if g.Token != 0 {
		t.Errorf("token %d with fencing off, want 0", g.Token)
	}
	if _, err := d.Renew(ctx, r); err != nil {
		t.Errorf("Renew: %v", err)
	}
	if err := d.Unlock(ctx, r); err != nil {
		t.Errorf("Unlock: %v", err)
	}
	for i, a := range c.admin {
		if n, _ := a.Exists(ctx, DefaultPrefix+"{"+name+"}:fence").Result(); n != 0 {
			t.Errorf("node %d has a fencing counter with fencing off", i)
		}
	}
}

package redlock

import (
	"errors"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
)

// Inspect lists the locks a quorum of nodes holds for one owner, with the
// grant's token even where a node's acquire landed late (the owner's key
// under a higher counter of that node's), and nothing held on a minority
// only; it needs a quorum of nodes to answer.
func TestInspect(t *testing.T) {
	c := newCluster(t, 5)
	ctx := t.Context()
	l := c.locker(t, nil)
	d := l.Driver().(*Driver)
	base := uniqueName("inspect")
	held, err := l.Acquire(ctx, base+"/a")
	if err != nil {
		t.Fatal(err)
	}
	gone, err := l.Acquire(ctx, base+"/b")
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.Release(ctx); err != nil {
		t.Fatal(err)
	}
	c.set(t, base+"/minority", newOwner(), time.Minute, 0, 1) // 2 of 5: nobody holds it
	if _, err := l.Acquire(ctx, uniqueName("elsewhere")); err != nil {
		t.Fatal(err)
	}

	check := func(what string) {
		t.Helper()
		got, err := d.Inspect(ctx, base+"/")
		if err != nil {
			t.Fatalf("%s: Inspect: %v", what, err)
		}
		if len(got) != 1 {
			t.Fatalf("%s: Inspect = %+v, want only %s/a", what, got, base)
		}
		g := got[0]
		if g.Name != base+"/a" || g.Owner != held.Owner() || g.Token != held.Token() || g.Waiters != -1 {
			t.Errorf("%s: Inspect = %+v, want %s/a owned by %s with token %d", what, g, base, held.Owner(), held.Token())
		}
		if left := time.Until(g.Expires); left <= 0 || left > held.TTL() {
			t.Errorf("%s: expires in %v, want within the TTL %v", what, left, held.TTL())
		}
	}
	// Node 0 as an acquire that landed after the grant leaves it: the
	// holder's key under a counter of its own.
	_, fence := d.keys(base + "/a")
	if err := c.admin[0].Set(ctx, fence, held.Token()+1000, 0).Err(); err != nil {
		t.Fatal(err)
	}
	check("all nodes up")
	c.kill(3, 4)
	check("2 of 5 nodes down")
	c.kill(2)
	if _, err := d.Inspect(ctx, base+"/"); !errors.Is(err, dlock.ErrNoQuorum) {
		t.Errorf("Inspect with 3 of 5 nodes down = %v, want ErrNoQuorum", err)
	}
}

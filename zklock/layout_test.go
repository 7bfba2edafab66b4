package zklock

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

// TestFormatNames checks each layout's node names against the names the
// peers themselves make (as listed on a real server while Curator 5.4 and
// kazoo 2.8 held their locks) and dlock's own.
func TestFormatNames(t *testing.T) {
	const guid = "358d3f34d1774bddbf1855e6ec434d2e"
	for _, c := range []struct {
		f    *format
		kind string
		made string // nodePath("/p", guid, kind) without "/p/"
		seen string // a name as the server makes it
		seq  uint32
	}{
		{dlockFormat, kindLock, "_c_" + guid + "-lock#", "_c_" + guid + "-lock#0000000007", 7},
		{curatorFormat, kindLock, "_c_358d3f34-d177-4bdd-bf18-55e6ec434d2e-lock-", "_c_358d3f34-d177-4bdd-bf18-55e6ec434d2e-lock-0000000000", 0},
		{curatorFormat, kindRead, "_c_358d3f34-d177-4bdd-bf18-55e6ec434d2e-__READ__", "_c_358d3f34-d177-4bdd-bf18-55e6ec434d2e-__READ__0000000012", 12},
		{curatorFormat, kindWrite, "_c_358d3f34-d177-4bdd-bf18-55e6ec434d2e-__WRIT__", "_c_358d3f34-d177-4bdd-bf18-55e6ec434d2e-__WRIT__-000000003", 1<<32 - 3},
		{curatorFormat, kindLatch, "_c_358d3f34-d177-4bdd-bf18-55e6ec434d2e-latch-", "_c_358d3f34-d177-4bdd-bf18-55e6ec434d2e-latch-0000000004", 4},
		{kazooFormat, kindWrite, guid + "__lock__", guid + "__lock__0000000030", 30},
		{kazooFormat, kindRead, guid + "__rlock__", guid + "__rlock__0000000027", 27},
	} {
		if got := c.f.nodePath("/p", guid, c.kind); got != "/p/"+c.made {
			t.Errorf("%s nodePath(/p, %s) = %q, want %q", c.f.layout, c.kind, got, "/p/"+c.made)
		}
		got, ok := c.f.parse(c.seen)
		if want := (child{name: c.seen, guid: guid, kind: c.kind, seq: c.seq}); !ok || got != want {
			t.Errorf("%s parse(%q) = %+v, %v; want %+v", c.f.layout, c.seen, got, ok, want)
		}
	}
	// Not lock nodes: the znodes of longer names, and a peer's names
	// without a sequence number.
	for _, f := range []*format{dlockFormat, curatorFormat, kazooFormat} {
		for _, name := range []string{"orders", "lock-", "x__lock__", "x__lock__12", "_c_abc-lock-00000000001x"} {
			if c, ok := f.parse(name); ok {
				t.Errorf("%s parse(%q) = %+v, want no lock node", f.layout, name, c)
			}
		}
	}
}

// TestFormatQueues checks which nodes each mode queues with where a
// peer's kinds share a znode.
func TestFormatQueues(t *testing.T) {
	const g = "358d3f34d1774bddbf1855e6ec434d2e"
	names := []string{g + "__rlock__0000000002", g + "__lock__0000000001", "sub", g + "__lock__0000000003"}
	var got []uint32
	for _, c := range kazooFormat.queueOf(names, driver.Exclusive) {
		got = append(got, c.seq)
	}
	if len(got) != 2 || got[0] != 1 || got[1] != 3 {
		t.Errorf("kazoo mutex queue %v, want [1 3] (kazoo's Lock ignores ReadLock's nodes)", got)
	}
	if n := len(kazooFormat.queueOf(names, driver.Read)); n != 3 {
		t.Errorf("kazoo readers-writer queue has %d nodes, want 3", n)
	}
	cur := []string{"_c_" + g[:8] + "-" + g[8:12] + "-" + g[12:16] + "-" + g[16:20] + "-" + g[20:] + "-latch-0000000001", "_c_00000000-0000-0000-0000-000000000000-lock-0000000002"}
	if q := curatorFormat.queueOf(cur, driver.Leader); len(q) != 1 || q[0].seq != 1 {
		t.Errorf("curator election queue %+v, want the latch node alone", q)
	}
	if q := curatorFormat.queueOf(cur, driver.Exclusive); len(q) != 1 || q[0].seq != 2 {
		t.Errorf("curator mutex queue %+v, want the lock node alone", q)
	}
}

// TestLayoutParam checks the URL parameter and the option.
func TestLayoutParam(t *testing.T) {
	ctx := context.Background()
	_, err := dlock.Open(ctx, "zk://127.0.0.1:1/locks?layout=zookeeper")
	var pe *dlock.ParamError
	if !errors.As(err, &pe) || pe.Param != "layout" {
		t.Errorf("Open with layout=zookeeper: %v, want a *dlock.ParamError for layout", err)
	}
	if _, err := NewDriver([]string{"127.0.0.1:1"}, &Options{Layout: "Curator"}); err == nil {
		t.Error("NewDriver with Layout \"Curator\" succeeded, want an error")
	}
	d, err := NewDriver([]string{"127.0.0.1:1"}, &Options{Layout: LayoutKazoo})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Supports(driver.Permit) || !d.Supports(driver.Read) || !d.Supports(driver.Leader) {
		t.Error("kazoo layout: want every mode but the semaphore")
	}
	if why := d.UnsupportedReason(driver.Permit); !strings.Contains(why, "kazoo layout has no semaphore") {
		t.Errorf("UnsupportedReason(permit) = %q, want the layout's reason", why)
	}
	if why := d.UnsupportedReason(driver.Read); why != "" {
		t.Errorf("UnsupportedReason(read) = %q, want none", why)
	}
	l, err := dlock.New(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquirePermit(ctx, "s", 2); !errors.Is(err, dlock.ErrUnsupported) || !strings.Contains(err.Error(), "no semaphore") {
		t.Errorf("TryAcquirePermit in the kazoo layout: %v, want ErrUnsupported with the reason", err)
	}
}

func TestParseChild(t *testing.T) {
	const g = "0123456789abcdef0123456789abcdef"
	for _, c := range []struct {
		name string
		ok   bool
		seq  uint32
	}{
		{"_c_" + g + "-lock#0000000007", true, 7},
		{"_c_" + g + "-lock#2147483647", true, 1<<31 - 1},
		{"_c_" + g + "-lock#-2147483648", true, 1 << 31},
		{"_c_" + g + "-lock#-000000001", true, 1<<32 - 1},
		{"_c_" + g + "-lock-0000000007", false, 0}, // a name segment may look like this
		{"_c_" + g + "-lock#", false, 0},
		{"_c_" + g + "-lock#x", false, 0},
		{"child", false, 0},
		{"_c_short-lock#0000000001", false, 0},
		{"_c_" + g + "-read#0000000003", true, 3},
		{"_c_" + g + "-write#0000000004", true, 4},
		{"_c_" + g + "-permit#0000000005", true, 5},
		{"_c_" + g + "-other#0000000005", false, 0},
		{"_c_" + g + "-#0000000005", false, 0},
		{"_c_" + g + "read#0000000005", false, 0},
	} {
		got, ok := parseChild(c.name)
		if ok != c.ok || (ok && (got.seq != c.seq || got.guid != g)) {
			t.Errorf("parseChild(%q) = %+v, %v; want seq %d, %v", c.name, got, ok, c.seq, c.ok)
		}
	}
}

// TestQueueOrderWraps: the queue order survives the wrap-around of the
// parent's cversion from 2^31-1 to -2^31.
func TestQueueOrderWraps(t *testing.T) {
	const g = "0123456789abcdef0123456789abcdef"
	names := []string{
		"_c_" + g + "-lock#-2147483647",
		"_c_" + g + "-lock#2147483646",
		"a-longer-name",
		"_c_" + g + "-lock#-2147483648",
		"_c_" + g + "-lock#2147483647",
	}
	const seqAt = len(nodePrefix) + guidLen + len("-lock#")
	var got []string
	for _, c := range dlockFormat.children(names) {
		got = append(got, c.name[seqAt:])
	}
	if want := []string{"2147483646", "2147483647", "-2147483648", "-2147483647"}; !slices.Equal(got, want) {
		t.Errorf("queue order %v, want %v", got, want)
	}
}

func TestGuidFor(t *testing.T) {
	const owner = "0123456789abcdef0123456789abcdef"
	if g := guidFor(owner); g != owner {
		t.Errorf("guidFor(a dlock owner) = %q, want the owner", g)
	}
	for _, o := range []string{"", "not hex", "0123456789ABCDEF0123456789ABCDEF"} {
		if g := guidFor(o); len(g) != guidLen || g == o {
			t.Errorf("guidFor(%q) = %q, want 32 random hex digits", o, g)
		}
	}
}

// TestFramer feeds frames in random pieces and checks that each frame's
// head is delivered once, whole.
func TestFramer(t *testing.T) {
	var stream bytes.Buffer
	var want [][]byte
	for i := range 200 {
		body := make([]byte, rand.IntN(40))
		for j := range body {
			body[j] = byte(i + j)
		}
		_ = binary.Write(&stream, binary.BigEndian, uint32(len(body)))
		stream.Write(body)
		want = append(want, body[:min(len(body), 16)])
	}
	for _, wantN := range []int{0, 16} {
		var f framer
		var got [][]byte
		p := stream.Bytes()
		for len(p) > 0 {
			k := min(len(p), 1+rand.IntN(30))
			f.feed(p[:k], wantN, func(head []byte) { got = append(got, bytes.Clone(head)) })
			p = p[k:]
		}
		if len(got) != len(want) {
			t.Fatalf("want %d: %d frames delivered, want %d", wantN, len(got), len(want))
		}
		for i := range got {
			w := want[i][:min(len(want[i]), wantN)]
			if !bytes.Equal(got[i], w) {
				t.Fatalf("want %d: frame %d head %x, want %x", wantN, i, got[i], w)
			}
		}
	}
}

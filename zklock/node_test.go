package zklock

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"
)

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

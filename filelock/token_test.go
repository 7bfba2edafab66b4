package filelock

import (
	"testing"
	"time"
)

func TestParseToken(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"", 0, false},
		{"\n", 0, false},
		{"00000000000000000042\n", 42, true},
		{"42", 42, true},
		{"18446744073709551615\n", 1<<64 - 1, true},
		{"18446744073709551616\n", 0, false},
		{"99999999999999999999\n", 0, false},
		{"12a\n", 0, false},
		{"-1\n", 0, false},
		{"\x00\x00\x00", 0, false},
		{"7\ntrailing", 7, true},
	} {
		got, ok := parseToken([]byte(c.in))
		if got != c.want || ok != c.ok {
			t.Errorf("parseToken(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestFormatToken(t *testing.T) {
	for _, v := range []uint64{0, 1, 1754000000000000, 1<<64 - 1} {
		var b [tokenLen]byte
		formatToken(&b, v)
		if b[tokenLen-1] != '\n' {
			t.Errorf("formatToken(%d) = %q: no newline", v, b)
		}
		if got, ok := parseToken(b[:]); !ok || got != v {
			t.Errorf("parseToken(formatToken(%d) = %q) = %d, %v", v, b, got, ok)
		}
	}
}

func TestNextToken(t *testing.T) {
	now := time.UnixMicro(1_754_000_000_000_000)
	us := uint64(now.UnixMicro())
	for _, c := range []struct {
		name   string
		stored string
		want   uint64
	}{
		{"new file: the clock", "", us},
		{"garbage: the clock", "xyz", us},
		{"older token: the clock", "00000000000000000005\n", us},
		{"token ahead of the clock: token + 1", "1754000000000100\n", us + 101},
		{"token equal to the clock: token + 1", "1754000000000000\n", us + 1},
	} {
		if got := nextToken([]byte(c.stored), now); got != c.want {
			t.Errorf("%s: nextToken(%q) = %d, want %d", c.name, c.stored, got, c.want)
		}
	}
	// A clock before 1970 leaves the stored token in charge.
	if got := nextToken([]byte("9\n"), time.Unix(-5, 0)); got != 10 {
		t.Errorf("nextToken with a clock before 1970 = %d, want 10", got)
	}
}

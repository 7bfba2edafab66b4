package natslock_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/natslock"
)

// kvKey is the rule nats.go checks KV keys against.
var kvKey = regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`)

func TestEncodeName(t *testing.T) {
	for _, c := range []struct{ name, key string }{
		{"orders/42", "orders/42"},
		{"A-b_c/9", "A-b_c/9"},
		{"job:nightly", "job=3Anightly"},
		{"a.b@c+d=e", "a=2Eb=40c=2Bd=3De"},
		{"==", "=3D=3D"},
		{"x.y", "x=2Ey"},
		{"=2E", "=3D2E"},
	} {
		if got := natslock.EncodeName(c.name); got != c.key {
			t.Errorf("EncodeName(%q) = %q, want %q", c.name, got, c.key)
		}
		if got, ok := natslock.DecodeName(c.key); !ok || got != c.name {
			t.Errorf("DecodeName(%q) = %q, %v; want %q", c.key, got, ok, c.name)
		}
	}
	for _, bad := range []string{"a.b", "a:b", "a=", "a=2", "a=2e", "a=41", "a=ZZ", "a b", "a@b"} {
		if got, ok := natslock.DecodeName(bad); ok {
			t.Errorf("DecodeName(%q) = %q, true; want false: no name encodes to it", bad, got)
		}
	}
}

// TestEncodeNameEveryByte: every pair of name bytes encodes to a valid
// KV key token (no '.'), decodes back, and no two names share a key.
func TestEncodeNameEveryByte(t *testing.T) {
	const alphabet = "abcXYZ019-_.:@+=/"
	seen := map[string]string{}
	for _, a := range alphabet {
		for _, b := range alphabet {
			for _, name := range []string{string(a), string(a) + string(b), "x" + string(a) + string(b) + "y"} {
				checkName(t, name, seen)
			}
		}
	}
	checkName(t, strings.Repeat("a.:@+=", dlock.MaxNameLen/6), seen)
}

func checkName(t *testing.T, name string, seen map[string]string) {
	t.Helper()
	key := natslock.EncodeName(name)
	if strings.Contains(key, ".") || !kvKey.MatchString("mutex."+key) {
		t.Errorf("EncodeName(%q) = %q: not one valid KV key token", name, key)
	}
	if got, ok := natslock.DecodeName(key); !ok || got != name {
		t.Errorf("DecodeName(EncodeName(%q)) = %q, %v", name, got, ok)
	}
	if other, dup := seen[key]; dup && other != name {
		t.Errorf("%q and %q both encode to %q", other, name, key)
	}
	seen[key] = name
}

// TestEncodeNameKeepsPrefixes: the key of a prefix of a name is a prefix
// of the name's key, which Inspect's filter relies on.
func TestEncodeNameKeepsPrefixes(t *testing.T) {
	name := "a.b/c:d@e+f=g/h"
	for i := range len(name) + 1 {
		if !strings.HasPrefix(natslock.EncodeName(name), natslock.EncodeName(name[:i])) {
			t.Errorf("EncodeName(%q) is not a prefix of EncodeName(%q)", name[:i], name)
		}
	}
}

func FuzzEncodeName(f *testing.F) {
	for _, s := range []string{"orders/42", "a.b@c+d=e", "=3D", "x:y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if dlock.ValidateName(name) != nil {
			return
		}
		key := natslock.EncodeName(name)
		if strings.Contains(key, ".") || !kvKey.MatchString(key) {
			t.Fatalf("EncodeName(%q) = %q: not a valid KV key token", name, key)
		}
		if got, ok := natslock.DecodeName(key); !ok || got != name {
			t.Fatalf("DecodeName(EncodeName(%q)) = %q, %v", name, got, ok)
		}
	})
}

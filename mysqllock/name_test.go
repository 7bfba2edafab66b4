package mysqllock

import (
	"strings"
	"testing"

	"github.com/dlockgo/dlock"
)

func TestLockName(t *testing.T) {
	long := strings.Repeat("x", 100)
	for _, c := range []struct{ prefix, name, want string }{
		{"dlock:", "orders/42", "dlock:orders/42"},
		{"dlock:", "Orders/42", "dlock:^orders/42"},
		{"", "AB", "^a^b"},
		{"dlock:", strings.Repeat("a", 58), "dlock:" + strings.Repeat("a", 58)},
		// 59 bytes do not fit after the prefix: hashed.
		{"dlock:", strings.Repeat("a", 59), "dlock:#"},
		// The escapes count: 29 upper-case letters take 58 bytes, 30 take 60.
		{"dlock:", strings.Repeat("A", 29), "dlock:" + strings.Repeat("^a", 29)},
		{"dlock:", strings.Repeat("A", 30), "dlock:#"},
		{"dlock:", long, "dlock:#"},
		{"", long, "#"},
	} {
		got := lockName(c.prefix, c.name)
		if strings.HasSuffix(c.want, "#") {
			if !strings.HasPrefix(got, c.want) || len(got) != MaxLockNameLen {
				t.Errorf("lockName(%q, %q) = %q, want %q and a hash, %d bytes in all", c.prefix, c.name, got, c.want, MaxLockNameLen)
			}
			continue
		}
		if got != c.want {
			t.Errorf("lockName(%q, %q) = %q, want %q", c.prefix, c.name, got, c.want)
		}
	}
	if lockName("dlock:", long+"1") == lockName("dlock:", long+"2") {
		t.Error("two long names that differ at the end map to the same lock")
	}
}

// FuzzLockName: every valid name maps to at most MaxLockNameLen bytes
// that need no quoting, differently from any other name, on servers that
// ignore case as on those that do not.
func FuzzLockName(f *testing.F) {
	for _, s := range []string{"a", "A", "orders/42", "Orders/42", "a:b", strings.Repeat("Z", 70)} {
		f.Add(s, "b")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if dlock.ValidateName(a) != nil || dlock.ValidateName(b) != nil {
			return
		}
		ka, kb := lockName(DefaultPrefix, a), lockName(DefaultPrefix, b)
		if len(ka) > MaxLockNameLen {
			t.Fatalf("lockName(%q) = %q: %d bytes", a, ka, len(ka))
		}
		for i := 0; i < len(ka); i++ {
			if c := ka[i]; c == '\'' || c == '\\' || isUpper(c) || c < 0x21 || c > 0x7e {
				t.Fatalf("lockName(%q) = %q holds %q", a, ka, c)
			}
		}
		if a != b && strings.EqualFold(ka, kb) {
			t.Fatalf("lockName(%q) = %q and lockName(%q) = %q are the same lock on a server that ignores case", a, ka, b, kb)
		}
	})
}

func TestQuoteTable(t *testing.T) {
	for in, want := range map[string]string{
		"dlock_tokens":          "`dlock_tokens`",
		"app.locks$1":           "`app`.`locks$1`",
		"a.b.c":                 "",
		"":                      "",
		"a.":                    "",
		"a b":                   "",
		"x`; DROP y":            "",
		"é":                     "",
		"a-b":                   "",
		strings.Repeat("t", 65): "",
	} {
		got, err := quoteTable(in)
		if (err == nil) != (want != "") || got != want {
			t.Errorf("quoteTable(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

package locktest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
)

// BadURL is a URL of a secured store that must fail to open, and what its
// error must say.
type BadURL struct {
	// What names the case in the test's output ("wrong password").
	What string
	// URL is the URL to open.
	URL string
	// Cause is a piece of text the error must hold, case-insensitively
	// (for example "certificate", "password", "cacert"), so that a user
	// can tell what was wrong.
	Cause string
}

// OpenTimeout bounds each Open of RefusesBadURLs.
const OpenTimeout = 15 * time.Second

// RefusesBadURLs opens each of bad with dlock.Open and checks that it
// fails, with an error that names its cause and holds none of secrets
// (passwords, tokens), as a user's log would show it.
func RefusesBadURLs(t *testing.T, secrets []string, bad []BadURL) {
	t.Helper()
	for _, b := range bad {
		t.Run(strings.ReplaceAll(b.What, " ", "_"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), OpenTimeout)
			defer cancel()
			start := time.Now()
			l, err := dlock.Open(ctx, b.URL)
			if err == nil {
				_ = l.Close()
				t.Fatalf("%s: Open succeeded, want an error", b.What)
			}
			msg := err.Error()
			t.Logf("%s: %v (after %v)", b.What, msg, time.Since(start).Round(time.Millisecond))
			if !strings.Contains(strings.ToLower(msg), strings.ToLower(b.Cause)) {
				t.Errorf("%s: the error does not say %q: %v", b.What, b.Cause, msg)
			}
			for _, s := range secrets {
				if s != "" && strings.Contains(msg, s) {
					t.Errorf("%s: the error shows a secret: %v", b.What, msg)
				}
			}
		})
	}
}

// Opener returns a Harness.NewLocker that opens rawURL with dlock.Open,
// within OpenTimeout, and fails the test if that fails.
func Opener(rawURL string) func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
	return func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), OpenTimeout)
		defer cancel()
		l, err := dlock.Open(ctx, rawURL, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
}

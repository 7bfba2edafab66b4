package pglock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/pglock"
)

// TestOpenSilentServer: Open against a server that accepts the connection
// and never answers fails: at the context's deadline, at the URL's
// connect_timeout with context.Background, and at the default connect
// timeout (shortened here) when the URL sets none.
func TestOpenSilentServer(t *testing.T) {
	addr := testenv.SilentServer(t)
	base := "postgres://postgres@" + addr + "/test?sslmode=disable"
	for _, c := range []struct {
		what    string
		url     string
		ctx     time.Duration // 0: context.Background
		def     time.Duration // the default connect timeout during the test
		atLeast time.Duration
	}{
		// The default connect timeout is a minute where another bound
		// must end the wait: only that bound can end it within the hang
		// bound below.
		{"context deadline", base, 300 * time.Millisecond, time.Minute, 300 * time.Millisecond},
		{"connect_timeout=1", base + "&connect_timeout=1", 0, time.Minute, time.Second},
		{"default", base, 0, 500 * time.Millisecond, 500 * time.Millisecond},
	} {
		t.Run(c.what, func(t *testing.T) {
			defer pglock.SetDefaultConnectTimeout(c.def)()
			start := time.Now() // before any bound starts: none can end before atLeast
			ctx := context.Background()
			if c.ctx > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.ctx)
				defer cancel()
			}
			done := make(chan error, 1)
			go func() {
				l, err := dlock.Open(ctx, c.url)
				if err == nil {
					_ = l.Close()
				}
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(10*c.atLeast + 5*time.Second):
				t.Fatalf("Open still blocked %v after it started", time.Since(start))
			}
			took := time.Since(start)
			t.Logf("Open failed after %v: %v", took, err)
			if err == nil {
				t.Fatal("Open of a silent server succeeded")
			}
			// Not before the bound; after it, a hang bound of 10×.
			if took < c.atLeast || took > 10*c.atLeast {
				t.Errorf("Open failed after %v, want it at %v (and before 10× that)", took, c.atLeast)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Open error %q does not match DeadlineExceeded", err)
			}
			if c.ctx == 0 && !strings.Contains(err.Error(), "connect timeout") {
				t.Errorf("Open error %q does not name the connect timeout", err)
			}
		})
	}
}

// TestDefaultConnectTimeout: a driver whose configuration sets no connect
// timeout gets DefaultConnectTimeout; one from a URL with connect_timeout
// keeps it.
func TestDefaultConnectTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := config(t)
	cfg.ConnectTimeout = 0
	d, err := pglock.NewDriver(ctx, cfg, &pglock.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if got := pglock.ConnectTimeout(d); got != pglock.DefaultConnectTimeout {
		t.Errorf("connect timeout %v with none configured, want %v", got, pglock.DefaultConnectTimeout)
	}
	for _, c := range []struct {
		kv   []string
		want time.Duration
	}{
		{nil, pglock.DefaultConnectTimeout},
		{[]string{"connect_timeout", "3"}, 3 * time.Second},
	} {
		l, err := dlock.Open(ctx, testURL(t, "", append([]string{"table", table}, c.kv...)...))
		if err != nil {
			t.Fatal(err)
		}
		if got := pglock.ConnectTimeout(l.Driver().(*pglock.Driver)); got != c.want {
			t.Errorf("URL with %v: connect timeout %v, want %v", c.kv, got, c.want)
		}
		_ = l.Close()
	}
}

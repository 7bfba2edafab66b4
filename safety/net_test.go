package safety

import (
	"context"
	"testing"
	"time"

	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/safety/internal/faultproxy"
)

// TestNetworkFaults puts a fault proxy between one worker (client 0) and
// Redis; the others connect directly. Right after client 0 is granted the
// lock, its link is black-holed for twice the TTL (a partition: nothing
// gets through, nothing is closed) or delayed by 300ms each way (so that
// a renewal's round trip exceeds the TTL's remaining share); then the
// links are cut and forwarded normally again.
func TestNetworkFaults(t *testing.T) {
	const ttl, hold = 500 * time.Millisecond, 750 * time.Millisecond
	faults := []struct {
		name  string
		apply func(p *faultproxy.Proxy, on bool)
	}{
		{"holder's connection black-holed for 2 TTL (partition)", func(p *faultproxy.Proxy, on bool) {
			p.SetBlackhole(on)
		}},
		{"holder's connection delayed 300ms each way for 2 TTL", func(p *faultproxy.Proxy, on bool) {
			if on {
				p.SetDelay(300 * time.Millisecond)
			} else {
				p.SetDelay(0)
			}
		}},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			addr := testenv.RedisAddr(t)
			p := proxy(t, addr)
			direct := "redis://" + addr + "?" + redisClientParams
			wl := workload{
				url:     direct,
				urls:    []string{"redis://" + p.Addr + "?" + redisClientParams},
				clients: 3,
				dur:     scale(4*time.Second, 15*time.Second),
				ttl:     ttl,
				hold:    hold,
				guard:   true,
			}
			faults := 0
			r, _ := run(t, wl, func(ctx context.Context, w *workers) {
				for {
					var e enter
					for e.client != 0 || e.token == 0 {
						var ok bool
						if e, ok = nextFresh(ctx, w, 60*time.Millisecond); !ok {
							return
						}
					}
					f.apply(p, true)
					faults++
					sleepCtx(ctx, 2*ttl)
					f.apply(p, false)
					p.Cut()
					if !sleepCtx(ctx, time.Second) {
						return
					}
				}
			})
			report(t, "redis", f.name, true, 1, r)
			if faults == 0 {
				t.Error("client 0 never held the lock: no fault was injected")
			}
			wantZero(t, r.Regressions, "token regressions")
			// The holder cut off must learn of its loss before another
			// client is granted the lock: its renewal hangs on the silent
			// connection, and neither that nor go-redis's 3 s read
			// timeout may hold up the loss signal.
			wantZero(t, r.Unnoticed, "overlaps of which neither holder had been told")
		})
	}
}

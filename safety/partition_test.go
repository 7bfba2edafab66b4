package safety

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockgo/dlock/internal/testenv"
)

// A cut is one partition injected during a run.
type cut struct {
	at, healed time.Time
	role       string // the cut member's role at the cut: leader or follower
}

// partTimes summarizes a run's cuts against its history: for each cut,
// when the holder that was cut off was told its lease ended, and when
// another client was granted the lock, both from the cut.
type partTimes struct {
	cuts            int
	leaseEnd, grant []time.Duration
	untold          int // cuts after which the holder's section ended without a loss
}

// measureCuts finds, for each cut, the section of holder that was open at
// the cut and the first section of another client granted after it.
func measureCuts(acqs []Acquisition, holder int, cuts []cut) partTimes {
	s := slices.Clone(acqs)
	slices.SortFunc(s, func(a, b Acquisition) int { return int(a.Enter - b.Enter) })
	var p partTimes
	for _, c := range cuts {
		at := c.at.UnixNano()
		p.cuts++
		for _, a := range s {
			if a.Client == holder && a.Enter <= at && at < a.Exit {
				if a.LostAt != 0 {
					p.leaseEnd = append(p.leaseEnd, time.Duration(a.LostAt-at))
				} else {
					p.untold++
				}
				break
			}
		}
		for _, a := range s {
			if a.Client != holder && a.Enter > at {
				p.grant = append(p.grant, time.Duration(a.Enter-at))
				break
			}
		}
	}
	return p
}

func (p *partTimes) add(o partTimes) {
	p.cuts += o.cuts
	p.untold += o.untold
	p.leaseEnd = append(p.leaseEnd, o.leaseEnd...)
	p.grant = append(p.grant, o.grant...)
}

// span formats min–max of ds in seconds.
func span(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	return fmt.Sprintf("%.2f–%.2f s", slices.Min(ds).Seconds(), slices.Max(ds).Seconds())
}

// partRow is one line of the partition timing table.
type partRow struct {
	backend, fault string
	partTimes
}

var (
	partMu   sync.Mutex
	partRows []partRow
)

func reportCuts(t *testing.T, backend, fault string, p partTimes) {
	t.Helper()
	t.Logf("%s / %s: %d cuts; cut → holder told its lease ended: %s (%d sections ended untold); cut → another client's grant: %s",
		backend, fault, p.cuts, span(p.leaseEnd), p.untold, span(p.grant))
	partMu.Lock()
	partRows = append(partRows, partRow{backend, fault, p})
	partMu.Unlock()
}

func writePartTable(b *strings.Builder) {
	partMu.Lock()
	defer partMu.Unlock()
	if len(partRows) == 0 {
		return
	}
	b.WriteString("\n| backend | fault | cuts | cut → the holder's lease ended (min–max) | cut → another client's grant (min–max) |\n|---|---|---|---|---|\n")
	for _, r := range partRows {
		fmt.Fprintf(b, "| %s | %s | %d | %s | %s |\n", r.backend, r.fault, r.cuts, span(r.leaseEnd), span(r.grant))
	}
}

// quorum is a 3-member store on test hosts, for the member partitions.
type quorum struct {
	name    string
	members int
	// url is the backend URL through the members given.
	url func(members ...int) string
	// role returns the member's role now: "leader" or "follower".
	role func(member int) string
}

func startEtcdQuorum(t *testing.T, nt *testenv.Net) quorum {
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Members: 3, Hosts: nt.Hosts})
	return quorum{
		name:    "etcd (3 members)",
		members: 3,
		url: func(members ...int) string {
			var eps []string
			for _, m := range members {
				eps = append(eps, c.Members[m].Endpoint)
			}
			return "etcd://" + strings.Join(eps, ",") + "/dlock-safety"
		},
		role: func(member int) string {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if c.Leader(ctx) == c.Members[member] {
				return "leader"
			}
			return "follower"
		},
	}
}

func startZKQuorum(t *testing.T, nt *testenv.Net, ttl time.Duration) quorum {
	c := testenv.StartZKWith(t, 3, testenv.ZKOptions{Hosts: nt.Hosts})
	return quorum{
		name:    fmt.Sprintf("zookeeper (3 servers, tick %v, syncLimit 5)", testenv.ZKTickTime),
		members: 3,
		url: func(members ...int) string {
			var addrs []string
			for _, m := range members {
				addrs = append(addrs, c.Servers[m].Addr)
			}
			return "zk://" + strings.Join(addrs, ",") + "/dlock-safety?session_timeout=" + ttl.String()
		},
		role: func(member int) string {
			mode, _ := c.Servers[member].Mode()
			return mode
		},
	}
}

// TestMemberPartition runs the workload on a 3-member etcd and ZooKeeper,
// each member on a test host of its own. Client 0, the holder, reaches
// only member m; the other clients reach only the other two. Right after
// client 0 is granted the lock, m is cut off from the other two (the
// holder on the minority side) for long enough that the majority hands
// the lock on; then the partition heals and the run goes on. m is chosen
// as a follower or as the leader at the start; a cut is made only while
// m still has that role. The holder must be told before anyone else is
// granted the lock (StillHeld 0), the guard must refuse every stale
// write, tokens must not go back (after the heal too), and the majority's
// waiting Acquire calls must ride out the re-election until their own
// deadline.
func TestMemberPartition(t *testing.T) {
	const ttl = 2 * time.Second
	stores := []struct {
		name  string
		start func(t *testing.T, nt *testenv.Net) quorum
	}{
		{"etcd", startEtcdQuorum},
		{"zookeeper", func(t *testing.T, nt *testenv.Net) quorum { return startZKQuorum(t, nt, ttl) }},
	}
	for _, st := range stores {
		for _, role := range []string{"follower", "leader"} {
			t.Run(st.name+"/"+role, func(t *testing.T) {
				fault := fmt.Sprintf("holder's member (the %s) cut off from the other two; TTL %v", role, ttl)
				var total Result
				var times partTimes
				runs := scale(1, 5)
				var backend string
				for range runs {
					r, p, name := memberPartitionRun(t, st.start, role, ttl)
					total, backend = total.Add(r), name
					times.add(p)
				}
				report(t, backend, fault, true, runs, total)
				reportCuts(t, backend, fault, times)
				if times.cuts == 0 {
					t.Fatal("no cut was made")
				}
				if total.StillHeld != 0 {
					t.Errorf("%d grants while an earlier holder's lease still said held", total.StillHeld)
				}
				if total.Regressions != 0 {
					t.Errorf("%d token regressions", total.Regressions)
				}
				if len(times.grant) < times.cuts {
					t.Errorf("the majority granted the lock after %d of %d cuts", len(times.grant), times.cuts)
				}
			})
		}
	}
}

func memberPartitionRun(t *testing.T, start func(*testing.T, *testenv.Net) quorum, role string, ttl time.Duration) (Result, partTimes, string) {
	nt := testenv.StartNet(t, 3)
	q := start(t, nt)
	// The holder's member: one with the role wanted, now.
	m := -1
	for i := range q.members {
		if q.role(i) == role {
			m = i
			break
		}
	}
	if m < 0 {
		t.Fatalf("%s: no member is %s", q.name, role)
	}
	var others []int
	var otherHosts []*testenv.Host
	for i := range q.members {
		if i != m {
			others = append(others, i)
			otherHosts = append(otherHosts, nt.Hosts[i])
		}
	}
	const part, gap = 5 * time.Second, 3 * time.Second
	wl := workload{
		url:     q.url(others...),
		urls:    []string{q.url(m)},
		clients: 3,
		dur:     scale(14*time.Second, 30*time.Second),
		ttl:     ttl,
		hold:    200 * time.Millisecond,
		// The holder works on through the cut, long past its lease's end,
		// so that its section meets the majority's next grant.
		holds:   []time.Duration{3 * ttl},
		timeout: 20 * time.Second,
		guard:   true,
		net:     nt,
	}
	var cuts []cut
	end := time.Now().Add(wl.dur) // the workers stop acquiring then
	r, w := run(t, wl, func(ctx context.Context, w *workers) {
		for {
			for {
				e, ok := nextFresh(ctx, w, 300*time.Millisecond)
				if !ok {
					return
				}
				if e.client == 0 {
					break
				}
			}
			if time.Until(end) < part {
				return // the majority would stop trying during the cut
			}
			if q.role(m) != role {
				continue
			}
			c := cut{at: time.Now(), role: role}
			nt.Partition([]*testenv.Host{nt.Hosts[m]}, otherHosts)
			whole := sleepCtx(ctx, part)
			nt.Heal()
			if !whole {
				return // the run ended during the cut: not measured
			}
			c.healed = time.Now()
			cuts = append(cuts, c)
			if !sleepCtx(ctx, gap) {
				return
			}
		}
	})
	// The majority's clients wait through the re-election: an acquire
	// that failed before its own deadline is a defect.
	w.mu.Lock()
	for _, e := range w.errs {
		if !strings.HasPrefix(e, "client 0:") && !strings.Contains(e, "deadline exceeded") {
			t.Errorf("a majority client's acquire failed before its deadline: %s", e)
		}
	}
	w.mu.Unlock()
	return r, measureCuts(w.acqs, 0, cuts), q.name
}

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

// A cutAt is one fault injected during a run, at a grant to holder, left
// before the workers stopped acquiring.
type cutAt struct {
	at     time.Time
	holder int
	left   time.Duration
}

// partTimes summarizes a run's cuts against its history: for each cut,
// when the holder that was cut off was told its lease ended, and when
// another client was granted the lock, both from the cut.
type partTimes struct {
	cuts            int
	leaseEnd, grant []time.Duration
	untold          int // cuts after which the holder's section ended without a loss
	// Cuts no other client's grant followed: with at least the settling
	// time (a hang bound, 10× the TTL) left in the run, and with less.
	ungranted, late int
}

// measureCuts finds, for each cut, the section of its holder that was
// open at the cut and the first section of another client granted after
// it; a cut with none counts as ungranted when the run had settle left
// after it, else as late.
func measureCuts(acqs []Acquisition, cuts []cutAt, settle time.Duration) partTimes {
	s := slices.Clone(acqs)
	slices.SortFunc(s, func(a, b Acquisition) int { return int(a.Enter - b.Enter) })
	var p partTimes
	for _, c := range cuts {
		at, holder := c.at.UnixNano(), c.holder
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
		granted := false
		for _, a := range s {
			if a.Client != holder && a.Enter > at {
				p.grant = append(p.grant, time.Duration(a.Enter-at))
				granted = true
				break
			}
		}
		switch {
		case granted:
		case c.left >= settle:
			p.ungranted++
		default:
			p.late++
		}
	}
	return p
}

func (p *partTimes) add(o partTimes) {
	p.cuts += o.cuts
	p.untold += o.untold
	p.ungranted += o.ungranted
	p.late += o.late
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

var partRows rows[partRow]

// reportCuts reports a fault's result (report, guard on) and its cuts'
// timings.
func reportCuts(t *testing.T, backend, fault string, runs int, r Result, p partTimes) {
	t.Helper()
	report(t, backend, fault, true, runs, r)
	logCuts(t, backend, fault, p)
}

// reportCutsGuard is reportCuts for one run with the guard as given.
func reportCutsGuard(t *testing.T, backend, fault string, guard bool, r Result, p partTimes) {
	t.Helper()
	report(t, backend, fault, guard, 1, r)
	logCuts(t, backend, fault, p)
}

func logCuts(t *testing.T, backend, fault string, p partTimes) {
	t.Helper()
	t.Logf("%s / %s: %d cuts; cut → holder told its lease ended: %s (%d sections ended untold); cut → another client's grant: %s (%d cuts near the run's end with none)",
		backend, fault, p.cuts, span(p.leaseEnd), p.untold, span(p.grant), p.late)
	partRows.add(partRow{backend, fault, p})
}

func writePartTable(b *strings.Builder) {
	rs := partRows.all()
	if len(rs) == 0 {
		return
	}
	b.WriteString("\n| backend | fault | cuts | cut → the holder's lease ended (min–max) | cut → another client's grant (min–max) |\n|---|---|---|---|---|\n")
	for _, r := range rs {
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

// A netFault is how a partition test cuts a host off from others.
type netFault struct {
	id, name string
	// apply makes (true) and lifts (false) the fault between a and the
	// hosts others.
	apply func(nt *testenv.Net, a *testenv.Host, others []*testenv.Host, on bool)
}

var (
	// cutOff drops every packet between a and others, both ways.
	cutOff = netFault{"cut", "cut off from", func(nt *testenv.Net, a *testenv.Host, others []*testenv.Host, on bool) {
		if on {
			nt.Partition([]*testenv.Host{a}, others)
		} else {
			nt.Heal()
		}
	}}
	// deafTo makes a drop what others send it; its own packets still
	// reach them.
	deafTo = netFault{"oneway", "deaf to (one way: its own packets still arrive)", func(nt *testenv.Net, a *testenv.Host, others []*testenv.Host, on bool) {
		if on {
			nt.Drop(a, others...)
		} else {
			nt.Heal()
		}
	}}
)

// flapper cuts a off from others and heals the cut each period until
// lifted. Each call makes a fault of its own (it keeps its loop's state).
func flapper(period time.Duration) netFault {
	var stop chan struct{}
	var done sync.WaitGroup
	return netFault{"flapping", fmt.Sprintf("cut off and healed every %v (flapping), from", period), func(nt *testenv.Net, a *testenv.Host, others []*testenv.Host, on bool) {
		if !on {
			close(stop)
			done.Wait()
			nt.Heal()
			return
		}
		stop = make(chan struct{})
		done.Go(func() {
			for cut := true; ; cut = !cut {
				if cut {
					nt.Partition([]*testenv.Host{a}, others)
				} else {
					nt.Heal()
				}
				select {
				case <-stop:
					return
				case <-time.After(period):
				}
			}
		})
	}}
}

// quorumStore starts a 3-member store on a test network.
type quorumStore struct {
	name  string
	start func(t *testing.T, nt *testenv.Net) quorum
}

// quorumStores are etcd and ZooKeeper, with sessions of ttl.
func quorumStores(ttl time.Duration) []quorumStore {
	return []quorumStore{
		{"etcd", startEtcdQuorum},
		{"zookeeper", func(t *testing.T, nt *testenv.Net) quorum { return startZKQuorum(t, nt, ttl) }},
	}
}

// TestMemberPartition runs the workload on a 3-member etcd and ZooKeeper,
// each member on a test host of its own. Client 0, the holder, reaches
// only member m; the other clients reach only the other two. Right after
// client 0 is granted the lock, m is cut off from the other two (the
// holder on the minority side) for long enough that the majority hands
// the lock on; then the partition heals and the run goes on. m is chosen
// as a follower or as the leader at the start; a cut is made only while
// m still has that role. Besides the clean cut, a follower is made deaf
// to the others (one way) or cut off and healed every 300ms (flapping).
// The holder must be told before anyone else is granted the lock
// (StillHeld 0), the guard must refuse every stale write, tokens must not
// go back (after the heal too), and the majority's waiting Acquire calls
// must ride out the re-election until their own deadline.
func TestMemberPartition(t *testing.T) {
	const ttl = 2 * time.Second
	stores := quorumStores(ttl)
	cases := []struct {
		role  string
		fault netFault
	}{
		{"follower", cutOff}, {"leader", cutOff}, {"follower", deafTo}, {"follower", flapper(300 * time.Millisecond)},
	}
	for _, st := range stores {
		for _, c := range cases {
			t.Run(st.name+"/"+c.role+"/"+c.fault.id, func(t *testing.T) {
				fault := fmt.Sprintf("holder's member (the %s) %s the other two; TTL %v", c.role, c.fault.name, ttl)
				var total Result
				var times partTimes
				runs := scale(1, 3)
				var backend string
				for range runs {
					r, p, name := memberPartitionRun(t, st.start, c.role, c.fault, ttl, "mutex", true)
					total, backend = total.Add(r), name
					times.add(p)
				}
				reportCuts(t, backend, fault, runs, total, times)
				checkCuts(t, total, times)
			})
		}
	}
}

// TestPartitionPositiveControl is the etcd follower partition with the
// guard off: the cut-off holder's late writes must land after its
// successor's, and the history must fail the linearizability check.
func TestPartitionPositiveControl(t *testing.T) {
	const ttl = 2 * time.Second
	r, times, backend := memberPartitionRun(t, startEtcdQuorum, "follower", cutOff, ttl, "mutex", false)
	reportCutsGuard(t, backend+" (positive control)", fmt.Sprintf("holder's member (the follower) cut off from the other two, guard off; TTL %v", ttl), false, r, times)
	if r.StaleAccepted == 0 {
		t.Errorf("no stale write accepted with the guard off although the cut-off holder wrote after its successor: %+v", r)
	}
	if r.NotLinearizable == 0 {
		t.Errorf("the history with stale writes accepted passed the linearizability check: %+v", r)
	}
}

func memberPartitionRun(t *testing.T, start func(*testing.T, *testenv.Net) quorum, role string, f netFault, ttl time.Duration, kind string, guard bool) (Result, partTimes, string) {
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
	clients := 3
	if kind == "permit" {
		clients = 4 // two permits: the others contend
	}
	wl := workload{
		kind:    kind,
		limit:   2,
		url:     q.url(others...),
		urls:    []string{q.url(m)},
		clients: clients,
		dur:     scale(14*time.Second, 30*time.Second),
		ttl:     ttl,
		hold:    200 * time.Millisecond,
		// The holder works on through the cut, long past its lease's end,
		// so that its section meets the majority's next grant.
		holds:   []time.Duration{3 * ttl},
		timeout: 20 * time.Second,
		guard:   guard,
		net:     nt,
	}
	r, times, w := cutHolder(t, wl, cutPlan{part: 5 * time.Second, gap: 3 * time.Second,
		apply: func(on bool) { f.apply(nt, nt.Hosts[m], otherHosts, on) },
		when:  func() bool { return q.role(m) == role },
	})
	// Every client waits through the re-election, and the holder through
	// its member's partition: an acquire that failed before its own
	// deadline is a defect.
	w.mu.Lock()
	for _, e := range w.errs {
		if !strings.Contains(e, "deadline exceeded") {
			t.Errorf("an acquire failed before its deadline: %s", e)
		}
	}
	w.mu.Unlock()
	return r, times, q.name
}

// TestRedlockPartition runs Redlock on 5 nodes, each on a test host of
// its own, and 3 clients, each on a host of its own too. Right after a
// client is granted the lock, its host is cut off from 3 of the 5 nodes
// (it keeps 2, a minority) for 3 TTLs: its renewals fail for want of a
// quorum while the others, reaching all five, wait for the 3 nodes' keys
// to expire. The holder must be told before anyone else is granted the
// lock.
func TestRedlockPartition(t *testing.T) {
	const ttl = time.Second
	nt := testenv.StartNet(t, 8)
	nodes := make([]*testenv.RedisServer, 5)
	for i := range nodes {
		nodes[i] = testenv.StartRedis(t, testenv.RedisOptions{Host: nt.Hosts[i]})
	}
	clients, majority := nt.Hosts[5:], nt.Hosts[:3]
	wl := workload{
		url:     "redlock://" + testenv.Addrs(nodes),
		clients: 3,
		dur:     scale(16*time.Second, 40*time.Second),
		ttl:     ttl,
		hold:    3 * ttl, // through the cut
		timeout: 10 * time.Second,
		guard:   true,
		net:     nt,
		hosts:   clients,
	}
	fault := fmt.Sprintf("holder cut off from 3 of 5 nodes for 3 TTL; TTL %v", ttl)
	r, times, _ := cutHolder(t, wl, cutPlan{part: 3 * ttl, gap: time.Second, anyClient: true, applyTo: func(c int, on bool) {
		cutOff.apply(nt, clients[c], majority, on)
	}})
	reportCuts(t, "redlock (5 nodes)", fault, 1, r, times)
	checkCuts(t, r, times)
}

// A cutPlan says how cutHolder injects its fault.
type cutPlan struct {
	part, gap time.Duration
	// apply makes (true) and lifts (false) the fault; applyTo, when set,
	// is used instead, with the client whose grant is cut.
	apply   func(on bool)
	applyTo func(client int, on bool)
	// when, if set, must hold for a grant to be cut.
	when func() bool
	// anyClient cuts at a grant to any client, not only to client 0.
	anyClient bool
}

// cutHolder runs wl and, each time client 0 (with p.anyClient, any
// client) is granted the lock and p.when holds, applies the fault for p.part, lifts it, waits p.gap and
// goes on until the run ends. A cut is made only while the run has
// p.part to go: the others must still be trying when it lifts. A grant
// is cut when it is fresh for the holder's own hold time (at least
// 300ms): within a third of it, so the cut lands in the section, however
// late a loaded machine delivers the report of a long section.
func cutHolder(t *testing.T, wl workload, p cutPlan) (Result, partTimes, *workers) {
	t.Helper()
	var cuts []cutAt
	// The worker is built first: a slow build must not eat into the run's
	// time, which end counts.
	worker(t)
	end := time.Now().Add(wl.dur) // the workers stop acquiring then
	holdOf := func(client int) time.Duration {
		h := wl.hold
		if client < len(wl.holds) && wl.holds[client] != 0 {
			h = wl.holds[client]
		}
		return max(h, 300*time.Millisecond)
	}
	r, w := run(t, wl, func(ctx context.Context, w *workers) {
		for {
			var e enter
			for {
				select {
				case <-ctx.Done():
					return
				case e = <-w.enters:
				}
				if (e.client == 0 || p.anyClient) && fresh(e, holdOf(e.client)) {
					break
				}
			}
			if time.Until(end) < p.part {
				return
			}
			if p.when != nil && !p.when() {
				continue
			}
			apply := p.apply
			if p.applyTo != nil {
				apply = func(on bool) { p.applyTo(e.client, on) }
			}
			at := time.Now()
			apply(true)
			whole := sleepCtx(ctx, p.part)
			apply(false)
			if !whole {
				return // the run ended during the cut: not measured
			}
			cuts = append(cuts, cutAt{at: at, holder: e.client, left: time.Until(end)})
			if !sleepCtx(ctx, p.gap) {
				return
			}
		}
	})
	return r, measureCuts(w.acqs, cuts, 10*wl.ttl), w
}

// checkCuts fails t unless another client's grant followed every cut
// made with at least 10× the TTL of the run left (a hang bound; a cut
// nearer the end may see none before the workers stop) and at least one
// cut in all, no grant came while an earlier lease still said held, and
// no token went back.
func checkCuts(t *testing.T, r Result, times partTimes) {
	t.Helper()
	if times.cuts == 0 {
		t.Fatal("no cut was made")
	}
	wantZero(t, r.StillHeld, "grants while an earlier holder's lease still said held")
	wantZero(t, r.Regressions, "token regressions")
	wantZero(t, r.NotLinearizable, "runs not linearizable against the fenced lock")
	if times.ungranted > 0 || len(times.grant) == 0 {
		t.Errorf("another client was granted the lock after %d of %d cuts (%d cuts with 10× the TTL left got none)", len(times.grant), times.cuts, times.ungranted)
	}
}

// TestSentinelPartition runs the workload on a Sentinel-managed Redis (a
// primary, 2 replicas, 3 sentinels), each process on a test host of its
// own. Client 0, the holder, runs on a host of its own too; the others in
// the test's namespace. Right after client 0 is granted the lock, the
// primary and the holder's host are cut off from the replicas and the
// sentinels: the holder still reaches the old primary, the sentinels fail
// over to a replica, and the other clients follow them there.
func TestSentinelPartition(t *testing.T) {
	const ttl, hold = 500 * time.Millisecond, 200 * time.Millisecond
	// 0: the wait turned off (wait_replicas=0); 1: the default, which
	// waits for one replica where the primary has replicas.
	for _, waitReplicas := range []int{0, 1} {
		t.Run(map[int]string{0: "wait_replicas=0", 1: "default"}[waitReplicas], func(t *testing.T) {
			nt := testenv.StartNet(t, 7)
			ps := testenv.StartSentinel(t, testenv.SentinelOptions{Hosts: nt.Hosts[:6]})
			primary, holder := nt.Hosts[0], nt.Hosts[6]
			url := "redis+sentinel://" + strings.Join(ps.SentinelAddrs(), ",") + "?master_name=" + testenv.SentinelMaster + "&" + redisClientParams
			fault := "primary and holder cut off from the replicas and sentinels for 5s"
			url += "&wait_timeout=300ms"
			if waitReplicas == 0 {
				url += "&wait_replicas=0"
			} else {
				fault += ", the default (WaitReplicas 1)"
			}
			wl := workload{
				url:     url,
				clients: 3,
				dur:     scale(12*time.Second, 40*time.Second),
				ttl:     ttl,
				hold:    hold,
				holds:   []time.Duration{8 * time.Second}, // through the cut
				timeout: 10 * time.Second,
				guard:   true,
				net:     nt,
				hosts:   []*testenv.Host{holder},
			}
			r, times, _ := cutHolder(t, wl, cutPlan{part: 5 * time.Second, gap: 3 * time.Second, apply: func(on bool) {
				if on {
					nt.Partition([]*testenv.Host{primary, holder}, nt.Hosts[1:6])
				} else {
					nt.Heal()
				}
			}})
			backend := "redis+sentinel (primary, 2 replicas, 3 sentinels)"
			reportCuts(t, backend, fault, 1, r, times)
			if times.cuts == 0 {
				t.Fatal("no cut was made")
			}
			if waitReplicas == 0 {
				// Known and documented: the old primary keeps renewing the
				// holder's lock while the promoted replica hands it out.
				t.Logf("WaitReplicas 0: %d grants while the cut-off holder's lease was still seen held; %d token regressions; not linearizable: %d",
					r.StillHeld, r.Regressions, r.NotLinearizable)
				return
			}
			// Renewals wait for the replicas: the cut-off holder's renewals
			// fail, and its lease ends before the promoted replica lets the
			// key expire.
			checkCuts(t, r, times)
		})
	}
}

package redlock

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/doctor"
	"github.com/dlockgo/dlock/internal/redisutil"
)

// diagDoc is the docs section of the findings particular to Redlock.
const diagDoc = "docs/REDLOCK.md#doctor"

// Diagnose implements driver.Diagnoser. It asks every node at once, each
// within redisutil.CheckTimeout, and returns:
//
//   - nodes: how many answer against the quorum. All is ok; a quorum but
//     not all warns, naming the others; fewer than a quorum fails (no lock
//     can be granted or renewed), and the nodes that answer are still
//     checked. The error is for no node answering: nothing can be asked.
//   - node timeout: the slowest node's round trip against
//     Options.NodeTimeout: a node slower than it never votes.
//   - distinct servers: two nodes that are one server (the same run_id)
//     fail, as that server votes twice.
//   - per node, its address in the text: the round trip and clock (TIME),
//     maxmemory-policy, persistence and role (a replica fails: the nodes
//     must be independent primaries), read as redisutil.Diagnose reads
//     them and judged for Redlock.
//
// It only reads.
func (d *Driver) Diagnose(ctx context.Context, ttl time.Duration) ([]driver.Finding, error) {
	if d.closed.Load() {
		return nil, driver.ErrClosed
	}
	reports := make([]nodeReport, len(d.clients))
	var wg sync.WaitGroup
	for i, c := range d.clients {
		wg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, redisutil.CheckTimeout)
			defer cancel()
			reports[i] = diagnoseNode(nctx, c, nodeAddr(c, i), ttl)
		})
	}
	wg.Wait()
	up, slowest := 0, -1
	var down []string
	var firstErr error
	for i, r := range reports {
		if r.err != nil {
			down = append(down, fmt.Sprintf("%s (%v)", r.addr, r.err))
			firstErr = cmp.Or(firstErr, r.err)
			continue
		}
		up++
		if slowest < 0 || r.worst > reports[slowest].worst {
			slowest = i
		}
	}
	if up == 0 {
		return nil, fmt.Errorf("redlock: none of the %d nodes answers: %s: %w", len(d.clients), reports[0].addr, firstErr)
	}
	fs := []driver.Finding{d.quorumFinding(up, down), d.timeoutFinding(reports, slowest)}
	fs = append(fs, distinct(reports))
	for _, r := range reports {
		fs = append(fs, r.findings...)
	}
	return fs, nil
}

// nodeReport is what Diagnose read of one node.
type nodeReport struct {
	addr        string
	err         error // the node did not answer
	best, worst time.Duration
	runID       string // "" when INFO server was refused
	findings    []driver.Finding
}

// nodeAddr names client i for the findings.
func nodeAddr(c redis.UniversalClient, i int) string {
	if rc, ok := c.(*redis.Client); ok {
		return rc.Options().Addr
	}
	return fmt.Sprintf("node %d", i)
}

// diagnoseNode reads one node: a PING first (the dial, so that it is not
// timed as a round trip), then its clock, settings and run_id.
func diagnoseNode(ctx context.Context, c redis.UniversalClient, addr string, ttl time.Duration) nodeReport {
	r := nodeReport{addr: addr}
	if r.err = c.Ping(ctx).Err(); r.err != nil {
		return r
	}
	fs, err := doctor.Clock(ctx, ttl, diagDoc, func(ctx context.Context) (time.Time, error) {
		start := time.Now()
		t, err := c.Time(ctx).Result()
		if rtt := time.Since(start); err == nil {
			r.best = min(cmp.Or(r.best, rtt), rtt)
			r.worst = max(r.worst, rtt)
		}
		return t, err
	})
	if err != nil {
		r.err = err
		return r
	}
	for _, f := range append(fs, redisutil.Diagnose(ctx, c, "").Findings...) {
		f = forRedlock(f)
		f.Found += " (" + addr + ")"
		r.findings = append(r.findings, f)
	}
	if info, err := c.Info(ctx, "server").Result(); err == nil {
		r.runID = redisutil.InfoField(info, "run_id")
	}
	return r
}

// forRedlock rewrites a finding of redisutil.Diagnose, written for one
// server, where Redlock's reading differs: an evicting node takes one vote,
// a node restarted without its data forgets the locks it held on a quorum,
// and a replica is not an independent node.
func forRedlock(f driver.Finding) driver.Finding {
	if f.Severity == driver.OK {
		return f
	}
	switch f.Check {
	case "maxmemory-policy":
		f.Doc = diagDoc
		if f.Severity == driver.Fail {
			f.Why = "An evicted lock key takes this node's vote from its holder unnoticed; with a quorum's keys evicted, another client takes the lock while the holder still uses it"
		}
	case "persistence":
		f.Doc = diagDoc
		f.Why = "A node that comes back without its last writes (appendonly no, or a host crash under appendfsync no) forgets the locks it held: " +
			"a lock held on a bare quorum that included it then has a minority, and another client can take it; fencing tokens stay increasing"
		f.Fix = "Set appendonly yes with appendfsync always (everysec loses up to a second to a host crash), " +
			"or keep a restarted node out for at least the longest TTL in use (delayed restart)"
	case "role":
		f.Doc = diagDoc
		if f.Severity == driver.Fail {
			f.Why = "Redlock's nodes must be independent primaries: a replica refuses the lock's writes and never votes, " +
				"or, made writable, loses its votes at the next resynchronisation, and its primary's failure is its own"
			f.Fix = "List independent primaries only, none a replica of another (REPLICAOF NO ONE, and no replicaof in redis.conf)"
		}
	}
	return f
}

// quorumFinding judges how many nodes answer against the quorum; down
// names the others.
func (d *Driver) quorumFinding(up int, down []string) driver.Finding {
	n := len(d.clients)
	f := driver.Finding{Check: "nodes", Found: fmt.Sprintf("%d of %d nodes answer; quorum %d", up, n, d.quorum), Doc: diagDoc}
	if len(down) == 0 {
		return f
	}
	f.Found += "; not answering: " + strings.Join(down, ", ")
	f.Fix = "Bring the nodes that do not answer back, or correct their addresses; a node restarted without persistence only after the longest TTL in use"
	if up < d.quorum {
		f.Severity = driver.Fail
		f.Why = "No lock can be granted or renewed without a quorum: every acquisition fails with ErrNoQuorum, and leases in use are lost at their next renewal"
		return f
	}
	f.Severity = driver.Warn
	f.Why = fmt.Sprintf("Every grant and renewal needs %d nodes: %d more down and none succeeds, and leases in use are lost at their next renewal", d.quorum, up-d.quorum+1)
	return f
}

// timeoutFinding judges the nodes' round trips against the node timeout:
// a node whose fastest round trip outlasts it fails; else the slowest
// round trip of any node is reported.
func (d *Driver) timeoutFinding(reports []nodeReport, slowest int) driver.Finding {
	f := driver.Finding{Check: "node timeout", Doc: diagDoc}
	fix := fmt.Sprintf("Raise node_timeout (Options.NodeTimeout, at most %v) well above the round trip, or move the node closer to this host", MaxNodeTimeout)
	for _, r := range reports {
		if r.err == nil && r.best >= d.nodeTimeout {
			f.Severity = driver.Fail
			f.Found = fmt.Sprintf("fastest round trip %v (%s); node timeout %v", r.best.Round(time.Microsecond), r.addr, d.nodeTimeout)
			f.Why = "Every request to this node outlasts the node timeout, so it never votes: the Redlock runs with one node fewer than it counts"
			f.Fix = fix
			return f
		}
	}
	r := reports[slowest]
	f.Found = fmt.Sprintf("slowest round trip %v (%s); node timeout %v", r.worst.Round(time.Microsecond), r.addr, d.nodeTimeout)
	if r.worst >= d.nodeTimeout/2 {
		f.Severity = driver.Warn
		f.Why = "A request slower than the node timeout counts as the node's missing vote; with this little room a busy moment costs votes, and grants and renewals fail without a quorum"
		f.Fix = fix
	}
	return f
}

// distinct fails when two nodes that answered are one server (the same
// run_id): that server's vote counts twice.
func distinct(reports []nodeReport) driver.Finding {
	f := driver.Finding{Check: "distinct servers", Doc: diagDoc}
	seen := map[string]string{} // run_id → address
	var same, unread []string
	for _, r := range reports {
		switch {
		case r.err != nil:
		case r.runID == "":
			unread = append(unread, r.addr)
		case seen[r.runID] != "":
			same = append(same, r.addr+" is "+seen[r.runID])
		default:
			seen[r.runID] = r.addr
		}
	}
	switch {
	case len(same) > 0:
		f.Severity = driver.Fail
		f.Found = strings.Join(same, ", ") + " (the same run_id)"
		f.Why = "One server listed twice votes twice: a quorum of the list can be a minority of the servers, and two clients can hold the lock at once"
		f.Fix = "List each server once (two names or addresses of one host count twice)"
	case len(unread) > 0:
		f.Found = fmt.Sprintf("%d nodes with distinct run_id; not read (INFO server refused) on %s", len(seen), strings.Join(unread, ", "))
	default:
		f.Found = fmt.Sprintf("%d nodes, each a server of its own (run_id)", len(seen))
	}
	return f
}

var _ driver.Diagnoser = (*Driver)(nil)

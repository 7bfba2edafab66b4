package redislock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/driver"
)

// sentinelDoc is the docs section of the Sentinel findings.
const sentinelDoc = "docs/REDIS.md#sentinel"

// diagnoseSentinel checks the sentinels of a redis+sentinel:// URL, each
// asked at once on a connection of its own, which it closes:
//
//   - sentinels: how many of those listed answer; some not answering
//     warns, none fails.
//   - sentinel quorum: SENTINEL CKQUORUM on each that answers; one
//     that cannot reach the quorum or a majority to authorise a failover
//     fails.
//   - sentinel replicas: the replicas the first that answers lists
//     (SENTINEL REPLICAS); none that can be promoted (up, linked, priority
//     above 0) warns: a failover has nowhere to go.
//   - min-replicas-to-write on the primary, for information.
func (d *Driver) diagnoseSentinel(ctx context.Context) []driver.Finding {
	fo := d.sentinel
	answers := make([]sentinelAnswer, len(fo.SentinelAddrs))
	var wg sync.WaitGroup
	for i, addr := range fo.SentinelAddrs {
		wg.Go(func() { answers[i] = askSentinel(ctx, fo, addr) })
	}
	wg.Wait()

	f := driver.Finding{Check: "sentinels", Doc: sentinelDoc}
	var down []string
	var first *sentinelAnswer // the first listed that answers
	for i, a := range answers {
		switch {
		case a.err != nil:
			down = append(down, fmt.Sprintf("%s (%v)", a.addr, a.err))
		case first == nil:
			first = &answers[i]
		}
	}
	up := len(answers) - len(down)
	f.Found = fmt.Sprintf("%d of %d listed answer", up, len(answers))
	if first != nil {
		if others, err := strconv.Atoi(first.master["num-other-sentinels"]); err == nil {
			f.Found += fmt.Sprintf("; %s knows %d sentinels of %s", first.addr, others+1, fo.MasterName)
		}
	}
	if len(down) > 0 {
		f.Found += "; not answering: " + strings.Join(down, ", ")
		f.Severity = driver.Warn
		f.Why = "A sentinel that does not answer neither votes for a failover nor tells this client where the primary is"
		f.Fix = "Restart the sentinels that do not answer, or correct their addresses in the URL"
	}
	if first == nil {
		f.Severity = driver.Fail
		f.Why = "No sentinel answers: a failed primary is not replaced, and the client cannot find the primary once its connections drop"
		return []driver.Finding{f}
	}
	return []driver.Finding{f, quorumFinding(answers, first), replicasFinding(first), d.minReplicasFinding(ctx)}
}

// sentinelAnswer is what one sentinel said.
type sentinelAnswer struct {
	addr     string
	err      error // it did not answer
	ckquorum string
	noQuorum error // CKQUORUM's refusal
	master   map[string]string
	replicas []map[string]string
	listErr  error // SENTINEL REPLICAS refused
}

// askSentinel asks the sentinel at addr, with the client's sentinel
// credentials, TLS and dialer, for CKQUORUM, MASTER and REPLICAS.
func askSentinel(ctx context.Context, fo *redis.FailoverOptions, addr string) sentinelAnswer {
	a := sentinelAnswer{addr: addr}
	c := redis.NewSentinelClient(&redis.Options{
		Addr: addr, Username: fo.SentinelUsername, Password: fo.SentinelPassword,
		TLSConfig: fo.TLSConfig, Dialer: fo.Dialer, DialTimeout: fo.DialTimeout, ReadTimeout: fo.ReadTimeout,
		ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
	})
	defer c.Close()
	a.ckquorum, a.err = c.CkQuorum(ctx, fo.MasterName).Result()
	// Its refusals: no quorum or majority, or no such master. Others
	// (WRONGPASS, NOPERM) say why the sentinel could not be asked.
	if _, ok := errors.AsType[redis.Error](a.err); ok &&
		(strings.HasPrefix(a.err.Error(), "NOQUORUM") || strings.HasPrefix(a.err.Error(), "ERR No such master")) {
		a.noQuorum, a.err = a.err, nil
	}
	if a.err != nil {
		return a
	}
	a.master, _ = c.Master(ctx, fo.MasterName).Result()
	a.replicas, a.listErr = c.Replicas(ctx, fo.MasterName).Result()
	return a
}

// quorumFinding judges the sentinels' CKQUORUM replies.
func quorumFinding(answers []sentinelAnswer, first *sentinelAnswer) driver.Finding {
	f := driver.Finding{Check: "sentinel quorum", Doc: sentinelDoc,
		Found: fmt.Sprintf("quorum %s; %s", first.master["quorum"], first.ckquorum)}
	var refusals []string       // distinct, in the sentinels' order
	by := map[string][]string{} // refusal → the sentinels that gave it
	for _, a := range answers {
		if a.noQuorum != nil {
			msg := a.noQuorum.Error()
			if by[msg] == nil {
				refusals = append(refusals, msg)
			}
			by[msg] = append(by[msg], a.addr)
		}
	}
	if len(refusals) == 0 {
		return f
	}
	for i, msg := range refusals {
		refusals[i] = fmt.Sprintf("%s (%s)", msg, strings.Join(by[msg], ", "))
	}
	f.Severity = driver.Fail
	f.Found = fmt.Sprintf("quorum %s; %s", first.master["quorum"], strings.Join(refusals, "; "))
	f.Why = "When the primary fails no replica is promoted (too few sentinels to agree it is down, or to authorise the failover): no lock is granted until it returns"
	f.Fix = "Run at least three sentinels, a majority of them up, with a quorum no higher than the sentinels that run (SENTINEL SET <master> quorum <n>)"
	return f
}

// replicasFinding judges the replicas a sentinel lists: those up, linked
// to the primary and of a priority above 0 can be promoted.
func replicasFinding(a *sentinelAnswer) driver.Finding {
	f := driver.Finding{Check: "sentinel replicas", Doc: sentinelDoc}
	if a.listErr != nil {
		f.Severity, f.Found = driver.Warn, "SENTINEL REPLICAS refused: "+a.listErr.Error()
		f.Why = "Whether a failover has a replica to go to cannot be checked"
		f.Fix = "Grant +sentinel|replicas to the sentinel user, or check SENTINEL REPLICAS by hand"
		return f
	}
	var ok, not []string
	for _, r := range a.replicas {
		addr := r["ip"] + ":" + r["port"]
		flags := strings.Split(r["flags"], ",")
		switch {
		case slices.ContainsFunc(flags, func(s string) bool { return s == "s_down" || s == "o_down" || s == "disconnected" }):
			not = append(not, addr+" "+r["flags"])
		case r["master-link-status"] != "ok":
			not = append(not, addr+" link "+r["master-link-status"])
		case r["slave-priority"] == "0" || r["replica-priority"] == "0":
			not = append(not, addr+" priority 0")
		default:
			ok = append(ok, addr)
		}
	}
	f.Found = fmt.Sprintf("%d replicas, %d can be promoted (%s)", len(a.replicas), len(ok), a.addr)
	if len(not) > 0 {
		f.Found += "; not: " + strings.Join(not, ", ")
	}
	if len(ok) == 0 {
		f.Severity = driver.Warn
		f.Why = "A failover has nowhere to go: if the primary fails no lock is granted until it returns, and if it returns without its data the held locks are lost"
		f.Fix = "Attach a replica to the primary (replicaof), with replica-priority above 0"
	}
	return f
}

// minReplicasFinding reports the primary's min-replicas-to-write and
// min-replicas-max-lag, for information.
func (d *Driver) minReplicasFinding(ctx context.Context) driver.Finding {
	f := driver.Finding{Check: "min-replicas-to-write", Doc: sentinelDoc}
	conf := map[string]string{}
	for _, k := range []string{"min-replicas-to-write", "min-replicas-max-lag"} {
		m, err := d.client.ConfigGet(ctx, k).Result()
		if err != nil {
			f.Found = "not read: CONFIG GET refused: " + err.Error()
			return f
		}
		conf[k] = m[k]
	}
	f.Found = fmt.Sprintf("%s (max lag %ss) on the primary", conf["min-replicas-to-write"], conf["min-replicas-max-lag"])
	if conf["min-replicas-to-write"] == "0" {
		f.Why = "The primary grants with no replica connected: cut off with a holder, it goes on renewing that holder's lock while the sentinels promote a replica, unless grants wait for a replica (wait_replicas)"
	} else {
		f.Why = "A primary with fewer replicas than that within the lag refuses grants and renewals, so a primary cut off from its replicas stops granting"
	}
	return f
}

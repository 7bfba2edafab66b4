package etcdlock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/doctor"
)

// diagDoc is the docs section of Diagnose's findings.
const diagDoc = "docs/ETCD.md#doctor"

// noSpaceFix frees a cluster whose database is full (alarm NOSPACE).
const noSpaceFix = "compact and defragment (etcdctl compact, etcdctl defrag), raise --quota-backend-bytes or enable auto-compaction, " +
	"then etcdctl alarm disarm"

// Diagnose implements driver.Diagnoser. Its checks:
//
//   - round trip: five linearizable reads of a key of its own under the
//     prefix; clock: not read (etcd's API tells no time).
//   - members: the voting members (a serializable MemberList): one warns
//     (no fault tolerance), an even count warns (no more tolerance than
//     one fewer); endpoints: a client that knows fewer endpoints than
//     there are voting members warns.
//   - member, one per member: the Status of its client URL (version, raft
//     term, leader, database size); an alarm (NOSPACE, CORRUPT) fails, a
//     member that does not answer or knows no leader warns. Where Status
//     is refused (etcd 3.5 and later allow it to root only, when
//     authentication is on), one warning says so.
//   - leader: none fails, and ends the checks (nothing else can answer);
//     without Status, a linearizable read that succeeded shows one.
//   - version: below 3.3 fails (the driver's transactions compare
//     ranges).
//   - auth: AuthStatus (on etcd 3.4, which lacks it, Authenticate with the
//     client's user, which answers "not enabled" first); off warns unless
//     every endpoint and member is on loopback.
//   - lease TTL: a lease granted for the TTL as the driver asks (whole
//     seconds); one longer than the TTL warns (etcd's minimum, 1.5 × the
//     election timeout, or the rounding).
//   - permissions: a put of a key of its own under the prefix, attached
//     to that lease, and its delete; a refusal fails, naming the role's
//     grant for a permission error.
//
// The lease is revoked before Diagnose returns, even on an error or a
// cancelled ctx, which removes the key if its delete did not; should the
// revocation fail too, both go when the lease expires.
func (d *Driver) Diagnose(ctx context.Context, ttl time.Duration) ([]driver.Finding, error) {
	rctx, cancel := d.req(ctx)
	ml, err := d.c.MemberList(rctx, clientv3.WithSerializable())
	cancel()
	if err != nil {
		return nil, fmt.Errorf("etcdlock: diagnose: list the members: %w", err)
	}
	members, names := ml.Members, map[uint64]string{}
	slices.SortFunc(members, func(a, b *pb.Member) int { return strings.Compare(memberName(a), memberName(b)) })
	for _, m := range members {
		names[m.ID] = memberName(m)
	}
	sts, memberFs := d.statuses(ctx, members, names)
	clock := doctor.NoClock("etcd's API tells no time; leases run on the members' timers and this host's monotonic clock", diagDoc)
	fs := append([]driver.Finding{clock, membersFinding(members), d.endpointsFinding(members)}, memberFs...)
	if v, ok := versionFinding(sts); ok {
		fs = append(fs, v)
	}
	if leaderless(sts) {
		return append(fs, leaderFinding(sts, names, false)), nil
	}

	key := d.f.lockPrefix("#doctor") + "/" + rand.Text()
	best, worst, rtErr := doctor.RoundTrips(ctx, func(ctx context.Context) error {
		rctx, cancel := d.req(ctx)
		defer cancel()
		_, err := d.c.Get(rctx, key, clientv3.WithCountOnly())
		return err
	})
	if ctx.Err() != nil {
		return nil, fmt.Errorf("etcdlock: diagnose: %w", ctx.Err())
	}
	// etcd checks a read's permission after the leader confirmed it:
	// one refused answered too.
	answered := rtErr == nil || denied(rtErr)
	switch {
	case rtErr == nil:
		fs = append([]driver.Finding{doctor.RoundTrip(best, worst, ttl)}, fs...)
	case !answered:
		fs = append([]driver.Finding{{Check: "round trip", Severity: driver.Fail,
			Found: fmt.Sprintf("no linearizable read of %s answered: %v", key, rtErr),
			Why:   "Every grant, renewal and release needs the leader: none would succeed",
			Fix:   "Restore the cluster: more than half of the voting members running and reaching each other, and check their logs",
			Doc:   diagDoc}}, fs...)
	}
	fs = append(fs, leaderFinding(sts, names, answered), d.authFinding(ctx, members))
	switch {
	case rtErr == nil:
		fs = append(fs, d.tryLease(ctx, ttl, key)...)
	case answered:
		fs = append(fs, d.refused(ctx, "a read of "+key, rtErr))
	}
	return fs, nil
}

// denied reports whether err is etcd's refusal of a request for want of
// permission, or of a user.
func denied(err error) bool {
	return errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrUserEmpty)
}

// memberStatus is a member and what its Status call returned.
type memberStatus struct {
	m   *pb.Member
	st  *clientv3.StatusResponse
	err error
}

// statuses asks each member with a client URL for its Status and judges
// the answers, one finding per member, or a single one where every
// member refused the call for want of permission.
func (d *Driver) statuses(ctx context.Context, members []*pb.Member, names map[uint64]string) ([]memberStatus, []driver.Finding) {
	var sts []memberStatus
	var fs []driver.Finding
	refused := 0
	for _, m := range members {
		f := driver.Finding{Check: "member", Found: memberName(m), Doc: diagDoc}
		if len(m.ClientURLs) == 0 {
			f.Severity, f.Found = driver.Warn, f.Found+" has not started (no client URL)"
			f.Why = "A member that is down brings the cluster one failure closer to losing its quorum, when no lock is granted, released or renewed"
			f.Fix = "Start it with the --initial-cluster it was added with, or remove it (etcdctl member remove)"
			fs = append(fs, f)
			continue
		}
		rctx, cancel := d.req(ctx)
		st, err := d.c.Status(rctx, m.ClientURLs[0])
		cancel()
		sts = append(sts, memberStatus{m: m, st: st, err: err})
		if denied(err) {
			refused++
		}
		fs = append(fs, memberFinding(f, m, st, err, names))
	}
	if refused > 0 && refused == len(sts) {
		fs = []driver.Finding{{Check: "member", Severity: driver.Warn,
			Found: fmt.Sprintf("every member refused Status%s: %v", d.asUser(), sts[0].err),
			Why:   "Member health, alarms (a full database refuses every write) and the version cannot be read; the other checks still run",
			Fix:   "Run dlock doctor as a user with the root role to see them (etcd 3.5 and later allow Status to root only)",
			Doc:   diagDoc}}
	}
	return sts, fs
}

// memberFinding judges one member's Status (st, or the error err), in
// f, which names it; names are the members' names by ID.
func memberFinding(f driver.Finding, m *pb.Member, st *clientv3.StatusResponse, err error, names map[uint64]string) driver.Finding {
	f.Found += " at " + m.ClientURLs[0]
	if m.IsLearner {
		f.Found += " (learner)"
	}
	if err != nil {
		f.Severity, f.Found = driver.Warn, f.Found+" does not answer: "+err.Error()
		f.Why = "A member that is down or cut off brings the cluster one failure closer to losing its quorum, when no lock is granted, released or renewed"
		f.Fix = "Restart the member or repair its network, or advertise a client URL this host reaches (--advertise-client-urls); " +
			"remove it (etcdctl member remove) if it is gone for good"
		return f
	}
	f.Found += fmt.Sprintf(": etcd %s, raft term %d, db %d kB", st.Version, st.RaftTerm, st.DbSize/1000)
	if st.Leader != 0 {
		f.Found += ", leader " + nameOf(names, st.Leader)
	}
	var alarms []string
	for _, e := range st.Errors {
		if e != rpctypes.ErrNoLeader.Error() {
			alarms = append(alarms, strings.TrimSpace(e))
		}
	}
	switch {
	case len(alarms) > 0:
		f.Severity, f.Found = driver.Fail, f.Found+"; alarms: "+strings.Join(alarms, "; ")
		f.Why = "While an alarm is raised etcd refuses writes (NOSPACE: the database is full) or every request (CORRUPT): no lock is granted, released or renewed"
		f.Fix = "For NOSPACE: " + noSpaceFix + "; for CORRUPT, replace the member"
	case st.Leader == 0:
		f.Severity, f.Found = driver.Warn, f.Found+", no leader known"
		f.Why = "Every request sent to this member fails until it reaches a leader: it is cut off from the others, or an election is under way"
		f.Fix = "Repair its network to the other members (its peer URLs)"
	}
	return f
}

// leaderless reports whether some members answered Status and none of
// them knows a leader.
func leaderless(sts []memberStatus) bool {
	st := latest(sts)
	return st != nil && st.Leader == 0
}

// latest returns the Status answer of the highest raft term, preferring
// one that knows a leader; nil when no member answered.
func latest(sts []memberStatus) *clientv3.StatusResponse {
	var best *clientv3.StatusResponse
	for _, s := range sts {
		if s.st != nil && (best == nil || s.st.RaftTerm > best.RaftTerm || s.st.RaftTerm == best.RaftTerm && best.Leader == 0) {
			best = s.st
		}
	}
	return best
}

// leaderFinding judges the leader the members report, or, when none
// answered Status, whether a linearizable read was answered.
func leaderFinding(sts []memberStatus, names map[uint64]string, answered bool) driver.Finding {
	f := driver.Finding{Check: "leader", Doc: diagDoc}
	noLeader := func(found string) driver.Finding {
		f.Severity, f.Found = driver.Fail, found
		f.Why = "Without a leader etcd grants, releases and renews nothing: held locks are lost once their TTL runs out"
		f.Fix = "Restore a quorum: more than half of the voting members running and reaching each other (their peer URLs)"
		return f
	}
	st := latest(sts)
	switch {
	case st == nil && answered:
		f.Found = "one answered a linearizable read (no member's Status read)"
	case st == nil:
		return noLeader("unknown: no member's Status read, and no linearizable read answered")
	case st.Leader == 0:
		return noLeader(fmt.Sprintf("none, raft term %d", st.RaftTerm))
	default:
		f.Found = fmt.Sprintf("%s, raft term %d", nameOf(names, st.Leader), st.RaftTerm)
	}
	return f
}

// versionFinding judges the members' versions; false when no member
// answered Status.
func versionFinding(sts []memberStatus) (driver.Finding, bool) {
	var vs []string
	for _, s := range sts {
		if s.st != nil && !slices.Contains(vs, s.st.Version) {
			vs = append(vs, s.st.Version)
		}
	}
	if len(vs) == 0 {
		return driver.Finding{}, false
	}
	slices.Sort(vs)
	f := driver.Finding{Check: "version", Found: "etcd " + strings.Join(vs, ", "), Doc: "docs/ETCD.md#compatibility"}
	if len(vs) > 1 {
		f.Found += " (mixed, as during a rolling upgrade)"
	}
	for _, v := range vs {
		var major, minor int
		if _, err := fmt.Sscanf(v, "%d.%d", &major, &minor); err == nil && (major < 3 || major == 3 && minor < 3) {
			f.Severity = driver.Fail
			f.Why = "The driver's transactions compare key ranges, which etcd serves from 3.3 on: every acquisition fails"
			f.Fix = "Upgrade every member to etcd 3.4 or later"
		}
	}
	return f, true
}

// membersFinding judges the count of voting members.
func membersFinding(members []*pb.Member) driver.Finding {
	n := voters(members)
	f := driver.Finding{Check: "members", Found: fmt.Sprintf("%d voting", n), Doc: diagDoc}
	if learners := len(members) - n; learners > 0 {
		f.Found += fmt.Sprintf(", %d learners", learners)
	}
	switch {
	case n == 1:
		f.Severity = driver.Warn
		f.Why = "One member tolerates no failure: while it is down no lock is granted, and held locks are lost once their TTL runs out"
		f.Fix = "Run three or five members, and list them all in the URL"
	case n%2 == 0:
		f.Severity = driver.Warn
		f.Why = fmt.Sprintf("%d members tolerate no more failures than %d (a quorum is %d), and a partition into halves leaves neither side a quorum",
			n, n-1, n/2+1)
		f.Fix = "Add or remove a member, for an odd count"
	default:
		f.Found += fmt.Sprintf(": a quorum is %d, %d may fail", n/2+1, n/2)
	}
	return f
}

// endpointsFinding judges the client's endpoints against the count of
// voting members.
func (d *Driver) endpointsFinding(members []*pb.Member) driver.Finding {
	eps, n := d.c.Endpoints(), voters(members)
	f := driver.Finding{Check: "endpoints", Found: fmt.Sprintf("%d for %d voting members: %s", len(eps), n, strings.Join(eps, ", ")), Doc: diagDoc}
	if len(eps) < n {
		f.Severity = driver.Warn
		f.Why = "When the members this client knows stop, it cannot reach the others, which still hold a quorum: its locks are lost and it is granted none " +
			"(unless an endpoint is a load balancer in front of every member)"
		f.Fix = "List every member in the URL (etcd://host1:2379,host2:2379,host3:2379/prefix)"
	}
	return f
}

// authFinding judges whether the cluster requires authentication.
func (d *Driver) authFinding(ctx context.Context, members []*pb.Member) driver.Finding {
	f := driver.Finding{Check: "auth", Doc: diagDoc}
	on, err := d.authEnabled(ctx)
	addrs := d.c.Endpoints()
	for _, m := range members {
		addrs = append(addrs, m.ClientURLs...)
	}
	switch {
	case err != nil:
		f.Severity, f.Found = driver.Warn, "cannot tell: "+err.Error()
		f.Why = "Whether any client that reaches a member may delete lock keys is not known"
		f.Fix = "Check with etcdctl auth status"
	case on && d.c.Username == "":
		f.Found = "on, with no user name (the client certificate's common name, if any, is the user)"
	case on:
		f.Found = "on" + d.asUser()
	case loopbackOnly(addrs):
		f.Found = "off, every endpoint and member on loopback: only this host's processes reach them"
	default:
		f.Severity, f.Found = driver.Warn, "off, members reachable at "+strings.Join(addrs, ", ")
		f.Why = "Any client that reaches a member (unless the members require client certificates) may delete a lock key, " +
			"which frees the lock while its holder uses it, or put keys that hold every name"
		f.Fix = "Create a user whose role may read and write the prefix only (etcdctl role grant-permission ROLE --prefix=true readwrite PREFIX) " +
			"and root, run etcdctl auth enable, and put the user in the URL (etcds://user:password@...)"
	}
	return f
}

// authEnabled asks whether authentication is on: AuthStatus, or, on
// etcd 3.4, which lacks it, Authenticate with the client's user, which
// answers "not enabled" before it looks at the user (with auth on and no
// user, a failed attempt of the empty name, which the server logs).
func (d *Driver) authEnabled(ctx context.Context) (bool, error) {
	rctx, cancel := d.req(ctx)
	defer cancel()
	resp, err := d.c.AuthStatus(rctx)
	if err == nil {
		return resp.Enabled, nil
	}
	if status.Code(err) != codes.Unimplemented {
		return false, err
	}
	_, err = d.c.Authenticate(rctx, d.c.Username, d.c.Password)
	switch {
	case errors.Is(err, rpctypes.ErrAuthNotEnabled):
		return false, nil
	case err == nil, errors.Is(err, rpctypes.ErrAuthFailed):
		return true, nil
	}
	return false, err
}

// tryLease grants a lease as the driver would for ttl, judges the TTL etcd
// granted, then puts key on it and deletes it, as an acquisition and a
// release do, and revokes the lease.
func (d *Driver) tryLease(ctx context.Context, ttl time.Duration, key string) []driver.Finding {
	secs := leaseSeconds(ttl)
	rctx, cancel := d.req(ctx)
	g, err := d.c.Grant(rctx, secs)
	cancel()
	if err != nil {
		return []driver.Finding{d.refused(ctx, fmt.Sprintf("a %ds lease grant", secs), err)}
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		_, _ = d.c.Revoke(rctx, g.ID)
		cancel()
	}()
	fs := []driver.Finding{leaseTTLFinding(ttl, secs, g.TTL)}
	rctx, cancel = d.req(ctx)
	_, err = d.c.Put(rctx, key, "dlock doctor", clientv3.WithLease(g.ID))
	cancel()
	if err != nil {
		return append(fs, d.refused(ctx, "a put of "+key, err))
	}
	rctx, cancel = d.req(ctx)
	_, err = d.c.Delete(rctx, key)
	cancel()
	if err != nil {
		return append(fs, d.refused(ctx, "a delete of "+key, err))
	}
	found := "a put and a delete under " + strconv.Quote(d.f.prefix)
	return append(fs, driver.Finding{Check: "permissions", Found: found + d.asUser(), Doc: diagDoc})
}

// leaseTTLFinding judges the lease etcd granted (granted seconds) for
// locks of ttl, for which the driver asked secs.
func leaseTTLFinding(ttl time.Duration, secs, granted int64) driver.Finding {
	f := driver.Finding{Check: "lease TTL", Found: fmt.Sprintf("TTL %v: a %ds lease asked, %ds granted", ttl, secs, granted),
		Doc: "docs/ETCD.md#sessions-ttl-and-loss"}
	if time.Duration(granted)*time.Second <= ttl {
		return f
	}
	f.Severity = driver.Warn
	f.Why = "A holder that dies keeps its locks until the granted TTL, not the TTL asked for, runs out after its last renewal; " +
		"live holders renew by the granted TTL, so none loses a lock early"
	if granted > secs {
		f.Found += " (etcd's minimum: 1.5 × the election timeout, rounded up)"
		f.Fix = fmt.Sprintf("A TTL of at least %ds (--ttl, dlock.WithTTL), or a shorter --election-timeout on the members", granted)
	} else {
		f.Found += " (leases are whole seconds)"
		f.Fix = fmt.Sprintf("A TTL of whole seconds (--ttl %ds, dlock.WithTTL)", granted)
	}
	return f
}

// refused is the permissions finding of an operation (what) that etcd
// refused with err: a failure, whose fix for a permission error names the
// user's roles. Without a prefix (layout=concurrency) the doctor's key
// lies outside every lock's range, so that a permission error there is
// a warning that nothing was checked.
func (d *Driver) refused(ctx context.Context, what string, err error) driver.Finding {
	f := driver.Finding{Check: "permissions", Severity: driver.Fail, Found: what + d.asUser() + " refused: " + err.Error(), Doc: diagDoc,
		Why: "Every acquisition reads the prefix and puts a key attached to a lease, and every release deletes one: each would be refused"}
	switch {
	case errors.Is(err, rpctypes.ErrUserEmpty):
		f.Fix = "Give the client a user whose role may read and write the prefix (etcd://user:password@host/prefix)"
	case errors.Is(err, rpctypes.ErrPermissionDenied) && d.f.prefix == "":
		f.Severity = driver.Warn
		f.Why = "Without a prefix (layout=concurrency) each lock name is a key range of its own, and this key is in none: the role's grants were not checked"
		f.Fix = "Check that the role may read and write every name it locks, or give the URL a prefix"
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		role := "ROLE"
		if roles := d.roles(ctx); len(roles) > 0 {
			role = roles[0]
			f.Found += " (roles: " + strings.Join(roles, ", ") + ")"
		}
		f.Fix = fmt.Sprintf("Grant a role of the user readwrite on the prefix: etcdctl role grant-permission %s --prefix=true readwrite %s", role, d.f.prefix)
	case errors.Is(err, rpctypes.ErrNoSpace):
		f.Fix = strings.ToUpper(noSpaceFix[:1]) + noSpaceFix[1:]
	default:
		f.Fix = "Check the members' logs for why they refuse it"
	}
	return f
}

// roles returns the roles of the client's user, nil when it has none or
// they cannot be read (a user may read its own).
func (d *Driver) roles(ctx context.Context) []string {
	if d.c.Username == "" {
		return nil
	}
	rctx, cancel := d.req(ctx)
	defer cancel()
	u, err := d.c.UserGet(rctx, d.c.Username)
	if err != nil {
		return nil
	}
	return u.Roles
}

// asUser is ", as user NAME" for a client with a user name, else "".
func (d *Driver) asUser() string {
	if d.c.Username == "" {
		return ""
	}
	return " as user " + strconv.Quote(d.c.Username)
}

// voters counts the members that are not learners.
func voters(members []*pb.Member) int {
	n := 0
	for _, m := range members {
		if !m.IsLearner {
			n++
		}
	}
	return n
}

// memberName is a member's name, or its ID in hex while it has none (it
// has not started).
func memberName(m *pb.Member) string {
	if m.Name != "" {
		return m.Name
	}
	return strconv.FormatUint(m.ID, 16)
}

// nameOf is the name of the member id in names, or the ID in hex.
func nameOf(names map[uint64]string, id uint64) string {
	if n, ok := names[id]; ok {
		return n
	}
	return strconv.FormatUint(id, 16)
}

// loopbackOnly reports whether every address (host:port, a URL, or a
// unix socket) is on loopback.
func loopbackOnly(addrs []string) bool {
	for _, a := range addrs {
		if strings.HasPrefix(a, "unix") {
			continue
		}
		if _, rest, ok := strings.Cut(a, "://"); ok {
			a = rest
		}
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			host = a
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return false
		}
	}
	return true
}

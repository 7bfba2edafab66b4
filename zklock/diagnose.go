package zklock

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/doctor"
)

// doctorDoc is the docs section of every finding of Diagnose.
const doctorDoc = "docs/ZOOKEEPER.md#doctor"

// configNode is the znode of the ensemble's dynamic configuration
// (ZooKeeper 3.5 and later; empty on a standalone server).
const configNode = "/zookeeper/config"

// Diagnose implements driver.Diagnoser on the driver's session (it waits
// for the session's handshake, at most the session timeout and no less
// than 10 s). Its checks:
//
//   - round trip: Samples writes (Set) of a node of its own, an ephemeral
//     node <prefix>/#doctor-<random> (no lock name holds a '#'), judged
//     against the granted session timeout, which is what a session-bound
//     lock lives by (ttl plays no part in it);
//   - clock: the server's, from the fastest write's mtime, which the
//     leader sets (± half the round trip and 1 ms for the mtime's
//     resolution);
//   - server version (the srvr four-letter word): a server older than
//     3.5.3 fails where the layout makes container znodes;
//   - ensemble: the voting members of /zookeeper/config (empty on a
//     standalone server), else srvr's modes; a standalone server, a single
//     member or an even number of them warn;
//   - servers: srvr asked of each server the URL names: two separate
//     stores (standalone servers) in one URL fail; a server that does not
//     answer, or fewer addresses than the ensemble has servers, warn;
//   - session timeout: the granted against the asked (a warning when the
//     server clamped it), with the server's bounds (the conf four-letter
//     word) where it tells them;
//   - prefix ACL: the prefix may be listed and a node created in it, as
//     this identity; with credentials, a prefix anyone may create in warns.
//
// It writes nothing but its own node and, where the prefix is missing, the
// prefix and the ancestors the first lock would create; it removes them
// before returning. When ctx ends first, the request under way goes on in
// the background (the zk client's calls take no context) and the removal
// follows it there: Close waits for both.
func (d *Driver) Diagnose(ctx context.Context, ttl time.Duration) ([]driver.Finding, error) {
	s, err := d.ready(ctx)
	if err == nil {
		hctx, cancel := context.WithTimeout(ctx, max(d.opt.SessionTimeout, 10*time.Second))
		err = s.handshake(hctx)
		cancel()
		if errors.Is(err, errRequeue) {
			err = s.endErr
		}
	}
	if err != nil {
		return nil, fmt.Errorf("zklock: %w", err)
	}
	granted := time.Duration(s.granted.Load())

	var p probe
	if err := d.call(ctx, func() error { return d.probe(ctx, s, &p) }); err != nil {
		return nil, fmt.Errorf("zklock: %w", err)
	}
	fs := []driver.Finding{d.roundTrip(p.best, p.worst, granted)}
	if p.createErr == nil {
		fs = append(fs, doctor.Skew(p.skew, p.best/2+time.Millisecond, doctorDoc))
	} else {
		fs = append(fs, doctor.NoClock("no node of its own could be created under the prefix (see prefix ACL)", doctorDoc))
	}

	ss := make([]srvr, len(d.servers))
	var conf string
	for i, a := range d.servers {
		ss[i] = d.srvr(ctx, a)
		if conf == "" && ss[i].err == nil {
			conf, _ = d.fourLetter(ctx, a, "conf")
		}
	}
	voters, observers := members(p.config)
	return append(fs,
		version(ss, d.format.containers),
		ensemble(p.config, p.configErr, voters, observers, ss),
		d.serversFinding(ctx, ss, voters+observers),
		d.timeoutFinding(granted, conf),
		d.aclFinding(&p),
	), nil
}

// probe is what Diagnose learnt through the session.
type probe struct {
	config    string // /zookeeper/config
	configErr error
	acl       []zk.ACL // the prefix's
	aclErr    error
	made      []string // what it created of the prefix and its ancestors, outermost first
	readErr   error    // listing the prefix
	createErr error    // creating its node, or what was missing of the prefix
	deleteErr error    // removing its node

	best, worst time.Duration // the writes' round trips (the reads' where it could create nothing)
	skew        time.Duration // the server's clock ahead of this host's, at the fastest write
}

// probe reads the dynamic configuration and the prefix's ACL, lists the
// prefix, and times Samples writes of a node of its own, which it then
// removes with what it created of the prefix. The error is the session's
// end; the server's refusals are in p.
func (d *Driver) probe(ctx context.Context, s *session, p *probe) error {
	prefix := d.opt.Prefix
	err := s.do(func() (err error) {
		b, _, err := s.conn.Get(configNode)
		p.config = string(b)
		return err
	})
	if p.configErr = err; errors.Is(err, errSessionEnded) {
		return err
	}
	node := prefix + "/#doctor-" + guidFor("")
	defer d.unprobe(s, node, p)
	for try := 0; ; try++ {
		if err := d.makeMissing(s, p); err != nil {
			if errors.Is(err, errSessionEnded) {
				return err
			}
			p.createErr = err
			break
		}
		err := s.do(func() error {
			_, err := s.conn.Create(node, nil, zk.FlagEphemeral, doctorACL(d.opt.Auth))
			if errors.Is(err, zk.ErrNodeExists) {
				return nil // created by a try whose reply was lost
			}
			return err
		})
		if errors.Is(err, zk.ErrNoNode) && try < 3 {
			continue // an empty container the server removed meanwhile
		}
		if err != nil {
			if errors.Is(err, errSessionEnded) {
				return err
			}
			p.createErr = fmt.Errorf("create %s: %w", node, err)
		}
		break
	}
	err = s.do(func() (err error) {
		p.acl, _, err = s.conn.GetACL(prefix)
		return err
	})
	if p.aclErr = err; errors.Is(err, errSessionEnded) {
		return err
	}
	switch _, err = s.listChildren(prefix); {
	case errors.Is(err, errSessionEnded):
		return err
	case !errors.Is(err, zk.ErrNoNode): // missing: its creation failed
		p.readErr = err
	}

	var fastest time.Duration
	write := func(ctx context.Context) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		start := time.Now()
		st, err := s.conn.Set(node, nil, -1)
		rtt := time.Since(start)
		if err == nil && (fastest == 0 || rtt < fastest) {
			// The leader set mtime (ms) within the round trip.
			fastest, p.skew = rtt, time.UnixMilli(st.Mtime).Sub(start.Add(rtt/2))
		}
		return err
	}
	if p.createErr != nil {
		write = func(context.Context) error {
			_, _, err := s.conn.Exists(prefix)
			return err
		}
	}
	p.best, p.worst, err = doctor.RoundTrips(ctx, write)
	return err
}

// makeMissing creates the prefix and its missing ancestors, as the first
// lock would, adding those it found missing to p.made.
func (d *Driver) makeMissing(s *session, p *probe) error {
	var missing []string
	for q := d.opt.Prefix; q != "/"; q = path.Dir(q) {
		ok, _, err := s.exists(q)
		if err != nil {
			return err
		}
		if ok {
			break
		}
		missing = append(missing, q)
	}
	if len(missing) == 0 {
		return nil
	}
	for _, q := range slices.Backward(missing) {
		if !slices.Contains(p.made, q) {
			p.made = append(p.made, q)
		}
	}
	return d.makeParents(s, d.opt.Prefix)
}

// unprobe removes the probe's node, then what it created of the prefix,
// innermost first (unless a lock was taken there meanwhile).
func (d *Driver) unprobe(s *session, node string, p *probe) {
	if err := s.do(func() error { return s.conn.Delete(node, -1) }); err != nil && !errors.Is(err, zk.ErrNoNode) {
		p.deleteErr = err
	}
	for _, q := range slices.Backward(p.made) {
		_ = s.do(func() error { return s.conn.Delete(q, -1) })
	}
}

// doctorACL is the ACL of Diagnose's node: its creator's, or anyone's
// without credentials.
func doctorACL(auth []Auth) []zk.ACL {
	if len(auth) > 0 {
		return zk.AuthACL(zk.PermAll)
	}
	return zk.WorldACL(zk.PermAll)
}

// roundTrip judges the round trips against the session timeout, in
// doctor.RoundTrip's bounds: a session's validity is counted from contact
// the leader confirmed, which takes round trips to prove.
func (d *Driver) roundTrip(best, worst, timeout time.Duration) driver.Finding {
	f := doctor.RoundTrip(best, worst, timeout)
	f.Found = strings.Replace(f.Found, "TTL", "session timeout", 1)
	f.Doc = doctorDoc
	switch f.Severity {
	case driver.Fail:
		f.Why = "A session's validity is counted from contact the leader confirmed, a round trip or two late: round trips this long end sessions, and their locks, while they live"
	case driver.Warn:
		f.Why = "A session's validity is counted from contact the leader confirmed, a round trip or two late; this one eats more than 5% of the session timeout, and a slower one could end a session in use"
	default:
		return f
	}
	f.Fix = fmt.Sprintf("A session timeout of at least %v (session_timeout, Options.SessionTimeout; within the server's maxSessionTimeout), or servers closer to this host", (30 * worst).Round(time.Second))
	return f
}

// flwWait bounds each four-letter word.
const flwWait = 3 * time.Second

// srvr is a server's answer to the srvr four-letter word.
type srvr struct {
	addr    string
	version string // "3.8.0"
	mode    string // standalone, leader, follower, observer
	down    bool   // no answer at all
	err     error  // why it gave no mode (down, or the word refused)
}

// srvr asks the server at addr for its version and mode.
func (d *Driver) srvr(ctx context.Context, addr string) srvr {
	r := srvr{addr: addr}
	out, err := d.fourLetter(ctx, addr, "srvr")
	if err != nil {
		r.down, r.err = true, err
		return r
	}
	for line := range strings.Lines(out) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ": ")
		switch k {
		case "Zookeeper version":
			v, _, _ = strings.Cut(v, ",")
			r.version, _, _ = strings.Cut(v, "-")
		case "Mode":
			r.mode = v
		}
	}
	if r.mode == "" {
		r.err = fmt.Errorf("srvr refused: %q", strings.TrimSpace(out))
	}
	return r
}

// fourLetter sends ZooKeeper's four-letter word w to the server at addr,
// on a connection of its own (TLS where the driver's are), and returns
// the answer; within flwWait and ctx.
func (d *Driver) fourLetter(ctx context.Context, addr, w string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, flwWait)
	defer cancel()
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	deadline, _ := ctx.Deadline()
	_ = c.SetDeadline(deadline)
	if cfg := d.tlsConfig(addr); cfg != nil {
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return "", fmt.Errorf("TLS with %s: %w", addr, err)
		}
		c = tc
	}
	if _, err := io.WriteString(c, w); err != nil {
		return "", err
	}
	b, err := io.ReadAll(io.LimitReader(c, 1<<20))
	if err != nil && len(b) == 0 {
		return "", err
	}
	return string(b), nil
}

// version judges the servers' versions.
func version(ss []srvr, containers bool) driver.Finding {
	f := driver.Finding{Check: "server version", Doc: doctorDoc}
	var each, distinct []string
	old := false
	for _, r := range ss {
		if r.version == "" {
			continue
		}
		each = append(each, r.version+" on "+r.addr)
		if !slices.Contains(distinct, r.version) {
			distinct = append(distinct, r.version)
		}
		old = old || !atLeast(r.version, 3, 5, 3)
	}
	switch len(distinct) {
	case 0:
		f.Severity = driver.Warn
		f.Found = "not read: no version line in srvr's answer"
		if i := slices.IndexFunc(ss, func(r srvr) bool { return r.err != nil }); i >= 0 {
			f.Found = fmt.Sprintf("not read: %s: %v", ss[i].addr, ss[i].err)
		}
		f.Why = "Whether the servers have container znodes (ZooKeeper 3.5.3 and later), which dlock's layout creates, cannot be checked"
		f.Fix = "Allow srvr in 4lw.commands.whitelist (ZooKeeper's default list has it), or check the version on the servers"
		return f
	case 1:
		f.Found = "ZooKeeper " + distinct[0]
	default:
		f.Found = "ZooKeeper " + strings.Join(each, ", ")
	}
	if old && containers {
		f.Severity = driver.Fail
		f.Why = "dlock's layout (and Curator's) creates the names' znodes as containers, which ZooKeeper has from 3.5.3: every acquisition fails"
		f.Fix = "Upgrade the servers to ZooKeeper 3.5.3 or later"
	}
	return f
}

// atLeast reports whether version v ("3.8.0") is major.minor.patch or
// later.
func atLeast(v string, want ...int) bool {
	parts := strings.Split(v, ".")
	for i, w := range want {
		n := 0
		if i < len(parts) {
			n, _ = strconv.Atoi(parts[i])
		}
		if n != w {
			return n > w
		}
	}
	return true
}

// members counts the voting members (participants) and the observers of
// a dynamic configuration (/zookeeper/config), whose lines are
// server.N=host:port:port[:role][;client address].
func members(config string) (voters, observers int) {
	for line := range strings.Lines(config) {
		if !strings.HasPrefix(line, "server.") {
			continue
		}
		addrs, _, _ := strings.Cut(strings.TrimSpace(line), ";")
		if strings.HasSuffix(addrs, ":observer") {
			observers++
		} else {
			voters++
		}
	}
	return voters, observers
}

// ensemble judges the ensemble's size and mode: the voting members of its
// configuration, else the servers' modes.
func ensemble(config string, configErr error, voters, observers int, ss []srvr) driver.Finding {
	f := driver.Finding{Check: "ensemble", Doc: doctorDoc}
	standalone := slices.ContainsFunc(ss, func(r srvr) bool { return r.mode == "standalone" })
	switch {
	case voters == 0 && (standalone || configErr == nil && strings.TrimSpace(config) == ""):
		f.Found = "a standalone server"
	case voters == 0:
		f.Severity = driver.Warn
		f.Found = fmt.Sprintf("size not read: %s has no server line", configNode)
		if configErr != nil {
			f.Found = fmt.Sprintf("size not read: %s: %v", configNode, configErr)
		}
		f.Why = "Whether the ensemble tolerates a server's loss cannot be checked"
		f.Fix = "Allow reading " + configNode + " (ZooKeeper 3.5 and later), or srvr in 4lw.commands.whitelist"
		return f
	default:
		f.Found = fmt.Sprintf("%d voting members (quorum %d, tolerates %d down)", voters, voters/2+1, (voters-1)/2)
		if observers > 0 {
			f.Found += fmt.Sprintf(" and %d observers", observers)
		}
	}
	switch {
	case voters <= 1:
		f.Severity = driver.Warn
		f.Why = "One server has no fault tolerance: its restart or crash ends every session, so every lock is lost, and none can be taken until it is back"
		f.Fix = "Run an ensemble of 3 or 5 servers and name them all in the URL"
	case voters%2 == 0:
		f.Severity = driver.Warn
		f.Why = fmt.Sprintf("A quorum is a majority: %d members tolerate no more servers down than %d, and lose the quorum (every session, so every lock) more often", voters, voters-1)
		f.Fix = "Run an odd number of voting members, 3 or 5 (observers do not vote)"
	}
	return f
}

// serversFinding judges the servers the URL names, from their srvr
// answers, against the ensemble's number of servers (0 when unknown).
func (d *Driver) serversFinding(ctx context.Context, ss []srvr, servers int) driver.Finding {
	f := driver.Finding{Check: "servers", Doc: doctorDoc}
	var said []string
	standalone, answered, down := 0, 0, 0
	for _, r := range ss {
		switch {
		case r.down:
			down++
			err := r.err
			if op, ok := errors.AsType[*net.OpError](err); ok {
				err = op.Err // without the address
			}
			said = append(said, fmt.Sprintf("%s down (%v)", r.addr, err))
		case r.mode != "":
			answered++
			said = append(said, r.addr+" "+r.mode)
		default:
			said = append(said, r.addr+" (mode not told)")
		}
		if r.mode == "standalone" {
			standalone++
		}
	}
	f.Found = strings.Join(said, ", ")
	addrs := d.addresses(ctx)
	switch {
	case standalone > 0 && answered > 1:
		f.Severity = driver.Fail
		f.Why = "The URL names separate stores: a standalone server shares its locks with no other server, so two clients on different servers both get the same lock"
		f.Fix = "Name the servers of one ensemble only, or a single standalone server"
	case down > 0:
		f.Severity = driver.Warn
		f.Why = "A session moves only to the servers its URL names: with one down, fewer are left to move to, and a server that never answers may not belong to the ensemble at all"
		f.Fix = "Bring the server back, or drop it from the URL"
	case addrs < servers:
		f.Severity = driver.Warn
		f.Found = fmt.Sprintf("%s; the URL names %d of the ensemble's %d servers", f.Found, addrs, servers)
		f.Why = "A session moves only to the servers its URL names: when those are down it expires, and its locks are lost, though the ensemble still serves"
		f.Fix = "Name every server of the ensemble in the URL (zk://a:2181,b:2181,c:2181/prefix)"
	}
	return f
}

// addresses counts the distinct addresses the URL's servers resolve to,
// as the zk client resolves them (a host name may stand for several
// servers).
func (d *Driver) addresses(ctx context.Context) int {
	seen := map[string]bool{}
	for _, a := range d.servers {
		host, port, _ := net.SplitHostPort(a)
		ips, err := net.DefaultResolver.LookupHost(ctx, host)
		if err != nil {
			ips = []string{host}
		}
		for _, ip := range ips {
			seen[net.JoinHostPort(ip, port)] = true
		}
	}
	return len(seen)
}

// timeoutFinding judges the session timeout the server granted against
// the one asked; conf is the server's answer to the conf four-letter word
// ("" when not told), for its bounds.
func (d *Driver) timeoutFinding(granted time.Duration, conf string) driver.Finding {
	asked := d.opt.SessionTimeout
	f := driver.Finding{Check: "session timeout", Found: fmt.Sprintf("asked %v, granted %v", asked, granted), Doc: doctorDoc}
	var lo, hi int
	for line := range strings.Lines(conf) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		switch k {
		case "minSessionTimeout":
			lo, _ = strconv.Atoi(v)
		case "maxSessionTimeout":
			hi, _ = strconv.Atoi(v)
		}
	}
	if lo > 0 && hi > 0 {
		f.Found += fmt.Sprintf(" (the server's bounds: %v to %v)", time.Duration(lo)*time.Millisecond, time.Duration(hi)*time.Millisecond)
	}
	if granted != asked {
		f.Severity = driver.Warn
		f.Why = "A lock outlives a connection loss or a pause up to the session timeout and no longer, and a crashed holder's lock is freed only after it: " +
			"the server clamped the one asked to its minSessionTimeout..maxSessionTimeout, and the granted one is what counts"
		f.Fix = fmt.Sprintf("Ask for %v (session_timeout, Options.SessionTimeout), or move the server's minSessionTimeout or maxSessionTimeout", granted)
	}
	return f
}

// aclFinding judges the prefix's ACL from what the probe could do there.
func (d *Driver) aclFinding(p *probe) driver.Finding {
	prefix := d.opt.Prefix
	who := "unauthenticated"
	if len(d.opt.Auth) > 0 {
		who = d.opt.Auth[0].String()
	}
	f := driver.Finding{Check: "prefix ACL", Doc: doctorDoc}
	acl := p.acl
	switch {
	case slices.Contains(p.made, prefix):
		acl = d.opt.ACL
		f.Found = fmt.Sprintf("%s does not exist; the first lock creates it with %s", prefix, aclString(acl))
	case p.aclErr != nil:
		f.Found = fmt.Sprintf("%s: ACL not read (%v)", prefix, p.aclErr)
	default:
		f.Found = prefix + ": " + aclString(acl)
	}
	switch {
	case p.createErr != nil, p.readErr != nil:
		f.Severity = driver.Fail
		f.Found += fmt.Sprintf("; %s: %v", who, cmp.Or(p.createErr, p.readErr))
		f.Why = "Each new name's znode is created under the prefix, and Open with credentials and dlock status list it: refused, they fail"
		f.Fix = fmt.Sprintf("Grant %s create and read on %s (setAcl), or use a prefix it may write", who, prefix)
		if len(d.opt.Auth) == 0 {
			f.Fix = "Authenticate as an identity the prefix's ACL names (zk://user:password@...), or use a prefix anyone may write"
		}
		return f
	case p.deleteErr != nil:
		f.Found += fmt.Sprintf("; %s may create in it but not delete (its node goes with the session)", who)
	default:
		f.Found += fmt.Sprintf("; %s may create in it", who)
	}
	if len(d.opt.Auth) > 0 && slices.ContainsFunc(acl, func(a zk.ACL) bool {
		return a.Scheme == "world" && a.Perms&zk.PermCreate != 0
	}) {
		f.Severity = driver.Warn
		f.Why = "Anyone may create a name's znode there first, with an ACL open to all, and then delete the lock nodes of this identity's holders under it"
		f.Fix = fmt.Sprintf("setAcl %s to this identity's digest (digest:user:hash:cdrwa), without world create", prefix)
	}
	return f
}

// aclString writes an ACL as scheme:id:rights entries (a digest's user
// without its hash; "creator" for the creating session's identities).
func aclString(acl []zk.ACL) string {
	var b []string
	for _, a := range acl {
		id := a.Scheme + ":" + a.ID
		switch a.Scheme {
		case "digest":
			user, _, _ := strings.Cut(a.ID, ":")
			id = "digest:" + user
		case "auth":
			id = "creator"
		}
		rights := ""
		for _, c := range "cdrwa" {
			if a.Perms&permBits[c] != 0 {
				rights += string(c)
			}
		}
		b = append(b, id+":"+rights)
	}
	return strings.Join(b, ", ")
}

package natslock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/doctor"
)

// doctorDoc is the docs section of every finding.
const doctorDoc = "docs/NATS.md#doctor"

// doctorKeyTTL is the per-key TTL of Diagnose's key: it expires by
// itself if its purge fails.
const doctorKeyTTL = time.Minute

// Diagnose implements driver.Diagnoser, with these checks:
//
//   - round trip: five writes of a key of its own, doctor.<random>, each
//     the request an acquisition makes (acknowledged by the stream leader
//     once the bucket's replicas stored it);
//   - clock: the stream leader's timestamp of the fastest of those
//     writes against the middle of its exchange, within half its round
//     trip (the leader stamps the message between the send and the ack);
//   - server version: the connected server's; older than 2.11 (no
//     per-key TTL) fails;
//   - jetstream: the account's JetStream (account information); its
//     store for the bucket's storage type 90% full or more warns;
//   - bucket: a bucket never written to warns (opening creates a missing
//     bucket, so a misspelt name gives clients that exclude nobody);
//   - replicas: R1 on a JetStream cluster, R2, or an offline replica
//     warns;
//   - storage: memory storage warns;
//   - sync_interval: no client can read it; a warning says what to check
//     on the servers.
//
// The key is purged before Diagnose returns (its purge marker expires
// after the marker TTL, as a release's does), and otherwise expires after
// a minute. Every request is bounded by the request timeout, within ctx;
// the purge is made even when ctx has ended, within twice that timeout.
func (d *Driver) Diagnose(ctx context.Context, ttl time.Duration) ([]driver.Finding, error) {
	if d.closed.Load() {
		return nil, driver.ErrClosed
	}
	rctx, cancel := d.reqCtx(ctx)
	account, err := d.js.AccountInfo(rctx)
	cancel()
	if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		return []driver.Finding{{Check: "jetstream", Severity: driver.Fail, Found: err.Error(),
			Why: "Every lock is a key of a JetStream KV bucket", Fix: "Enable JetStream on the servers and for this account", Doc: doctorDoc}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("natslock: diagnose: %w", err)
	}
	rctx, cancel = d.reqCtx(ctx)
	info, err := d.stream.Info(rctx)
	cancel()
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return []driver.Finding{{Check: "bucket", Severity: driver.Fail, Found: fmt.Sprintf("%s was deleted after opening", d.bucket),
			Why: "Every grant writes to the bucket: none succeeds", Fix: "Open again, which creates it anew (its tokens start again from 1)", Doc: doctorDoc}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("natslock: diagnose: %w", err)
	}
	fs := d.clock(ctx, ttl, info)
	return append(fs, d.version(), jetStreamUsage(account, info), d.written(info), d.replicas(info), d.storage(info), syncInterval()), nil
}

// clock writes the doctor key doctor.Samples times, each write expecting
// the previous one's revision, and reads each write's timestamp back
// from the stream leader: the round trip and clock findings. It purges
// the key before returning.
func (d *Driver) clock(ctx context.Context, ttl time.Duration, info *jetstream.StreamInfo) []driver.Finding {
	key := "doctor." + rand.Text()
	defer d.removeDoctorKey(ctx, key)
	var best, worst, skew time.Duration
	var rev uint64 // the key's last revision; 0: none yet
	var err error
	for i := range doctor.Samples {
		start := time.Now()
		var r uint64
		r, err = d.put(ctx, key, []byte("dlock doctor"), doctorKeyTTL, rev)
		rtt := time.Since(start)
		var e entry
		if err == nil {
			e, err = d.get(ctx, key)
		}
		if err == nil && e.rev != r {
			err = fmt.Errorf("read revision %d of %s after writing %d", e.rev, key, r)
		}
		if err != nil {
			break
		}
		rev = r
		if i == 0 || rtt < best {
			best = rtt
			// The leader stamped the message within the exchange.
			skew = e.time.Sub(start.Add(rtt / 2))
		}
		worst = max(worst, rtt)
	}
	if rev == 0 {
		return []driver.Finding{{Check: "round trip", Severity: driver.Fail,
			Found: "a write of the bucket failed: " + err.Error(),
			Why:   "Every grant, renewal and release is such a write: none would succeed",
			Fix: fmt.Sprintf("Give this user publish permission on $KV.%s.> and $JS.API.STREAM.MSG.GET.KV_%s, and check that the bucket's stream has a leader (nats stream info KV_%s)",
				d.bucket, d.bucket, d.bucket),
			Doc: doctorDoc}, doctor.NoClock("no write of the bucket succeeded", doctorDoc)}
	}
	f := doctor.Skew(skew, best/2, doctorDoc)
	if info.Cluster != nil && info.Cluster.Leader != "" {
		f.Found += ", by the bucket stream's leader " + info.Cluster.Leader
	}
	return []driver.Finding{doctor.RoundTrip(best, worst, ttl), f}
}

// removeDoctorKey purges key, which Diagnose may have written (a write
// that timed out may have been stored), within ctx's values but not its
// cancellation, so that it goes even when ctx ended.
func (d *Driver) removeDoctorKey(ctx context.Context, key string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*d.reqTimeout)
	defer cancel()
	if e, err := d.get(ctx, key); err == nil && e.found && !e.marker {
		_, _ = d.purge(ctx, key, e.rev)
	}
}

// version judges the connected server's version.
func (d *Driver) version() driver.Finding {
	nc := d.js.Conn()
	v := nc.ConnectedServerVersion()
	f := driver.Finding{Check: "server version",
		Found: fmt.Sprintf("nats-server %s (%s, the server this client is connected to)", v, nc.ConnectedServerName()), Doc: doctorDoc}
	if major, minor, ok := parseVersion(v); ok && (major < 2 || major == 2 && minor < 11) {
		f.Severity = driver.Fail
		f.Why = "Before 2.11 a key has no TTL of its own: a crashed holder's lock would never expire"
		f.Fix = "Upgrade every server of the cluster to nats-server 2.11 or later"
	}
	return f
}

// jetStreamUsage judges the account's JetStream store for the bucket's
// storage type against its limit.
func jetStreamUsage(a *jetstream.AccountInfo, info *jetstream.StreamInfo) driver.Finding {
	t := a.Tier
	if tier, ok := a.Tiers[fmt.Sprintf("R%d", info.Config.Replicas)]; ok {
		t = tier // limits per replica count
	}
	kind, used, limit, setting := "file", t.Store, t.Limits.MaxStore, "max_file"
	if info.Config.Storage == jetstream.MemoryStorage {
		kind, used, limit, setting = "memory", t.Memory, t.Limits.MaxMemory, "max_mem"
	}
	f := driver.Finding{Check: "jetstream", Doc: doctorDoc,
		Found: fmt.Sprintf("enabled for this account; %s store %d bytes, no account limit", kind, used)}
	if limit <= 0 {
		return f
	}
	f.Found = fmt.Sprintf("enabled for this account; %s store %d of %d bytes (%d%%)", kind, used, limit, used*100/uint64(limit))
	if used*10 >= uint64(limit)*9 {
		f.Severity = driver.Warn
		f.Why = "Once the account's store is full the bucket refuses writes: no lock can be granted, and held leases are lost at their next renewal"
		f.Fix = "Raise the account's JetStream limit (" + setting + "), or remove other streams' messages"
	}
	return f
}

// written judges whether any lock was ever written to the bucket, from
// its stream's state before Diagnose wrote its own key.
func (d *Driver) written(info *jetstream.StreamInfo) driver.Finding {
	f := driver.Finding{Check: "bucket", Doc: doctorDoc,
		Found: fmt.Sprintf("%s, created %s, %d writes so far (dlock doctor's included)", d.bucket, info.Created.UTC().Format(time.RFC3339), info.State.LastSeq)}
	if info.State.LastSeq == 0 {
		f.Severity = driver.Warn
		f.Found = fmt.Sprintf("%s has never been written to: created %v before this check",
			d.bucket, info.TimeStamp.Sub(info.Created).Round(time.Second))
		f.Why = "Clients exclude each other only within one bucket: one nobody has written to may have been created by a client whose URL names another bucket than the others use (a client's first open creates a missing bucket, with its URL's replicas and storage)"
		f.Fix = "Name the bucket the other clients use in the URL's path; delete a bucket created by mistake (nats kv del " + d.bucket + ")"
	}
	return f
}

// replicas judges the bucket's replica count against the cluster, and
// its replicas' state.
func (d *Driver) replicas(info *jetstream.StreamInfo) driver.Finding {
	n := info.Config.Replicas
	f := driver.Finding{Check: "replicas", Doc: doctorDoc}
	fix := fmt.Sprintf("Raise the bucket's replicas to 3 (nats stream edit KV_%s --replicas 3); the URL's replicas= applies only to a bucket it creates", d.bucket)
	c := info.Cluster
	if c == nil || c.Name == "" {
		f.Found = fmt.Sprintf("R%d on a single server, not a JetStream cluster", n)
		return f
	}
	var offline []string
	peers := []string{c.Leader + " (leader)"}
	for _, p := range c.Replicas {
		peers = append(peers, p.Name)
		if p.Offline {
			offline = append(offline, p.Name)
		}
	}
	f.Found = fmt.Sprintf("R%d on %s of cluster %s", n, strings.Join(peers, ", "), c.Name)
	switch {
	case n == 1:
		f.Found = fmt.Sprintf("R1 on %s alone, of cluster %s (%d servers known to this client)", c.Leader, c.Name, d.servers())
		f.Severity = driver.Warn
		f.Why = "The bucket lives on one server: while it restarts no lock can be granted or renewed (held leases are lost), " +
			"and if its store is lost every lock goes with it and the bucket starts again from sequence 1, so fencing tokens repeat"
		f.Fix = fix
	case n == 2:
		f.Severity = driver.Warn
		f.Why = "A majority of two is both: while either server is down no lock can be granted or renewed"
		f.Fix = fix
	case len(offline) > 0:
		f.Found += "; offline: " + strings.Join(offline, ", ")
		f.Severity = driver.Warn
		f.Why = "With a replica offline the bucket survives the loss of fewer servers than its replica count promises"
		f.Fix = "Bring the offline servers back, or move the bucket's replicas (nats stream cluster peer-remove)"
	}
	return f
}

// servers counts the servers this client knows: the URL's and those the
// cluster announced.
func (d *Driver) servers() int {
	urls := d.js.Conn().Servers()
	slices.Sort(urls)
	return len(slices.Compact(urls))
}

// storage judges where the bucket keeps its messages.
func (d *Driver) storage(info *jetstream.StreamInfo) driver.Finding {
	f := driver.Finding{Check: "storage", Found: strings.ToLower(info.Config.Storage.String()), Doc: doctorDoc}
	if info.Config.Storage == jetstream.MemoryStorage {
		f.Severity = driver.Warn
		f.Why = "A restart of the servers that store the bucket loses every lock and starts its sequence, and so the fencing tokens, again from 1: " +
			"a token already given to one holder is given to another"
		f.Fix = "Recreate the bucket with file storage, which an existing bucket cannot change to: delete it while no lock is held (nats kv del " + d.bucket +
			") and open with storage=file (the default); its tokens start again from 1, so reset what checks them"
	}
	return f
}

// syncInterval is the finding about the servers' sync_interval, which
// only their configuration and monitoring endpoint show.
func syncInterval() driver.Finding {
	return driver.Finding{Check: "sync_interval", Severity: driver.Warn,
		Found: "not readable by a client (only each server's configuration and monitoring endpoint show it)",
		Why: "By default JetStream acknowledges a write before it reaches the disk and syncs every two minutes: " +
			"an OS crash or power loss can lose acknowledged grants and sequence numbers (Jepsen, NATS 2.12.1, 2025-12), " +
			"so a lock can be granted twice and tokens repeat",
		Fix: "Check that every server's configuration has jetstream { sync_interval: always } " +
			"(its monitoring endpoint's /varz shows jetstream.config.sync_always: true)",
		Doc: doctorDoc}
}

package etcdlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/etcdlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// TestDiagnose: Diagnose (dlock doctor's checks) on clusters set up well
// and wrong on purpose. Three members pass every check, with no
// authentication on loopback; a TTL of a fraction of a second over whole
// seconds warns (leases are whole seconds); a client that knows one
// member of three warns; with two of three members killed, the last one
// knows no leader, which fails. One member warns, and so do two (an even
// count). With authentication on, a user whose role may read and write
// the prefix passes; once its role may only read it, the permission check
// fails, naming the role. No doctor key or lease is left behind.
func TestDiagnose(t *testing.T) {
	const ttl = 10 * time.Second
	t.Run("three members", func(t *testing.T) {
		c := testenv.StartEtcd(t, testenv.EtcdOptions{Members: 3})
		prefix := randomPrefix()
		fs := diagnose(t, c.Client(), prefix, ttl)
		locktest.NoFail(t, fs)
		locktest.WantFinding(t, fs, "members", driver.OK, "3 voting: a quorum is 2, 1 may fail")
		locktest.WantFinding(t, fs, "endpoints", driver.OK, "3 for 3 voting members")
		locktest.WantFinding(t, fs, "member", driver.OK, "etcd 3.")
		locktest.WantFinding(t, fs, "leader", driver.OK, "raft term")
		locktest.WantFinding(t, fs, "version", driver.OK, "etcd 3.")
		locktest.WantFinding(t, fs, "auth", driver.OK, "off, every endpoint and member on loopback")
		locktest.WantFinding(t, fs, "round trip", driver.OK, "TTL 10s")
		locktest.WantFinding(t, fs, "clock", driver.OK, "not read")
		locktest.WantFinding(t, fs, "lease TTL", driver.OK, "a 10s lease asked, 10s granted")
		locktest.WantFinding(t, fs, "permissions", driver.OK, "a put and a delete under \""+prefix+"\"")
		noneLeft(t, c.Client(), prefix)

		fs = diagnose(t, c.Client(), prefix, 1500*time.Millisecond)
		locktest.WantFinding(t, fs, "lease TTL", driver.Warn, "a 2s lease asked, 2s granted (leases are whole seconds)")

		fs = diagnose(t, testenv.EtcdClient(t, c.Endpoints()[:1]), prefix, ttl)
		locktest.WantFinding(t, fs, "endpoints", driver.Warn, "1 for 3 voting members")

		c.Members[1].Kill()
		c.Members[2].Kill()
		// The last member drops the leader it knew once its election
		// timeout passes; 20s is a hang bound.
		var last []driver.Finding
		if !locktest.Eventually(20*time.Second, func() bool {
			last = diagnose(t, c.Client(), prefix, ttl)
			return hasFinding(last, "leader", driver.Fail)
		}) {
			t.Fatalf("no failed leader check 20s after two of three members were killed: %+v", last)
		}
		locktest.WantFinding(t, last, "leader", driver.Fail, "none, raft term")
	})
	t.Run("one member", func(t *testing.T) {
		c := testenv.StartEtcd(t, testenv.EtcdOptions{})
		fs := diagnose(t, c.Client(), randomPrefix(), ttl)
		locktest.NoFail(t, fs)
		locktest.WantFinding(t, fs, "members", driver.Warn, "1 voting")
	})
	t.Run("two members", func(t *testing.T) {
		c := testenv.StartEtcd(t, testenv.EtcdOptions{Members: 2})
		fs := diagnose(t, c.Client(), randomPrefix(), ttl)
		locktest.NoFail(t, fs)
		locktest.WantFinding(t, fs, "members", driver.Warn, "2 voting")
	})
	t.Run("auth", func(t *testing.T) {
		c := testenv.StartEtcd(t, testenv.EtcdOptions{})
		prefix := randomPrefix()
		root := c.EnableAuth(etcdRootPW, testenv.EtcdUser{Name: "locks", Password: etcdLockPW, Prefix: prefix})
		user := c.ClientAs("locks", etcdLockPW)
		fs := diagnose(t, user, prefix, ttl)
		locktest.NoFail(t, fs)
		locktest.WantFinding(t, fs, "auth", driver.OK, `on as user "locks"`)
		locktest.WantFinding(t, fs, "permissions", driver.OK, `a put and a delete under "`+prefix+`" as user "locks"`)
		noneLeft(t, root, prefix)

		ctx := locktest.Context(t, 10*time.Second)
		if _, err := root.RoleGrantPermission(ctx, "locks", prefix, clientv3.GetPrefixRangeEnd(prefix),
			clientv3.PermissionType(clientv3.PermRead)); err != nil {
			t.Fatalf("make the role read-only: %v", err)
		}
		fs = diagnose(t, user, prefix, ttl)
		locktest.WantFinding(t, fs, "permissions", driver.Fail, "permission denied (roles: locks)")
		for _, f := range fs {
			if f.Check == "permissions" && f.Fix != "Grant a role of the user readwrite on the prefix: etcdctl role grant-permission locks --prefix=true readwrite "+prefix {
				t.Errorf("permissions fix: %q", f.Fix)
			}
		}
		noneLeft(t, root, prefix)
	})
}

// diagnose runs Diagnose on a driver of client with prefix, logging the
// findings as dlock doctor prints them.
func diagnose(t *testing.T, client *clientv3.Client, prefix string, ttl time.Duration) []driver.Finding {
	t.Helper()
	d := etcdlock.NewDriver(client, &etcdlock.Options{Prefix: prefix})
	defer d.Close()
	fs := locktest.Diagnose(t, d, ttl)
	for _, f := range fs {
		line := fmt.Sprintf("%-4s  %s: %s", f.Severity, f.Check, f.Found)
		if f.Severity != driver.OK {
			line += fmt.Sprintf(". %s. Fix: %s. See %s", f.Why, f.Fix, f.Doc)
		}
		t.Log(line)
	}
	return fs
}

// hasFinding reports whether fs has a finding of check with severity s.
func hasFinding(fs []driver.Finding, check string, s driver.Severity) bool {
	for _, f := range fs {
		if f.Check == check && f.Severity == s {
			return true
		}
	}
	return false
}

// noneLeft fails t if a doctor key under prefix, or any lease, is left.
func noneLeft(t *testing.T, admin *clientv3.Client, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	keys, err := admin.Get(ctx, prefix+"/#doctor/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("count doctor keys: %v", err)
	}
	leases, err := admin.Leases(ctx)
	if err != nil {
		t.Fatalf("list leases: %v", err)
	}
	if keys.Count != 0 || len(leases.Leases) != 0 {
		t.Errorf("left behind: %d doctor keys, %d leases", keys.Count, len(leases.Leases))
	}
}

package zklock_test

import (
	"errors"
	"net"
	"path"
	"slices"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/zklock"
)

// TestDiagnose: Diagnose (dlock doctor's checks) on servers set up well
// and wrong on purpose. A 3-server ensemble named whole in the URL passes
// every check, and the doctor's node and the prefix it made for it are
// gone afterwards; the same ensemble named by one server warns. A
// standalone server warns on its mode; a session timeout asked below the
// server's minSessionTimeout warns with both values; a URL naming two
// standalone servers fails; the prefix's ACL fails an identity that may
// not list it, or not create in it, and warns when, with credentials, anyone
// may create in it.
func TestDiagnose(t *testing.T) {
	t.Run("ensemble", func(t *testing.T) {
		c := testenv.StartZK(t, 3)
		prefix := testPrefix()
		fs := diagnose(t, c.Addrs(), prefix, 5*time.Second, nil)
		locktest.NoFail(t, fs)
		locktest.WantFinding(t, fs, "clock", driver.OK, "this host's")
		locktest.WantFinding(t, fs, "server version", driver.OK, "ZooKeeper 3.")
		locktest.WantFinding(t, fs, "ensemble", driver.OK, "3 voting members (quorum 2, tolerates 1 down)")
		locktest.WantFinding(t, fs, "servers", driver.OK, "leader")
		locktest.WantFinding(t, fs, "session timeout", driver.OK, "asked 5s, granted 5s")
		locktest.WantFinding(t, fs, "prefix ACL", driver.OK, prefix+" does not exist; the first lock creates it with world:anyone:cdrwa")
		adm := newAdmin(t, c.Addrs())
		if _, err := adm.conn.Sync("/"); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{prefix, path.Dir(prefix)} {
			if ok, _, err := adm.conn.Exists(p); err != nil || ok {
				t.Errorf("%s after Diagnose: exists %v, %v; want removed", p, ok, err)
			}
		}

		fs = diagnose(t, c.Addrs()[:1], prefix, 5*time.Second, nil)
		locktest.WantFinding(t, fs, "servers", driver.Warn, "the URL names 1 of the ensemble's 3 servers")

		down := closedAddr(t)
		fs = diagnose(t, append(c.Addrs(), down), prefix, 5*time.Second, nil)
		locktest.WantFinding(t, fs, "servers", driver.Warn, down+" down")
	})

	t.Run("secure client port", func(t *testing.T) {
		// The four-letter words go through TLS as the sessions do.
		pki := testenv.NewPKI(t)
		c := testenv.StartZKWith(t, 1, testenv.ZKOptions{TLS: pki})
		addr := c.Servers[0].SecureAddr
		d, err := zklock.NewDriver([]string{addr}, &zklock.Options{Prefix: testPrefix(), TLS: pki.ClientTLS(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		fs := locktest.Diagnose(t, d, 10*time.Second)
		locktest.WantFinding(t, fs, "server version", driver.OK, "ZooKeeper 3.")
		locktest.WantFinding(t, fs, "servers", driver.OK, addr+" standalone")
	})

	t.Run("standalone", func(t *testing.T) {
		// A tick of 1s: the server grants sessions of 2s to 60s.
		c := testenv.StartZKWith(t, 1, testenv.ZKOptions{Tick: time.Second})
		servers, prefix := c.Addrs(), testPrefix()
		ctx := locktest.Context(t, time.Minute)
		l, _ := newLocker(t, servers, prefix, 5*time.Second)
		lease := locktest.Must(t)(l.Acquire(ctx, "held"))
		defer lease.Release(ctx)

		fs := diagnose(t, servers, prefix, 5*time.Second, nil)
		locktest.NoFail(t, fs)
		locktest.WantFinding(t, fs, "ensemble", driver.Warn, "a standalone server")
		locktest.WantFinding(t, fs, "servers", driver.OK, servers[0]+" standalone")
		locktest.WantFinding(t, fs, "prefix ACL", driver.OK, prefix+": world:anyone:cdrwa; unauthenticated may create in it")
		adm := newAdmin(t, servers)
		if kids, _, err := adm.conn.Children(prefix); err != nil || !slices.Equal(kids, []string{"held"}) {
			t.Errorf("the prefix's children after Diagnose: %v, %v; want only the held lock's", kids, err)
		}
		if err := lease.Err(); err != nil {
			t.Errorf("the lease after Diagnose: %v", err)
		}

		fs = diagnose(t, servers, prefix, 500*time.Millisecond, nil)
		locktest.WantFinding(t, fs, "session timeout", driver.Warn, "asked 500ms, granted 2s (the server's bounds: 2s to 1m0s)")

		fs = diagnose(t, []string{servers[0], testenv.ZKAddr(t)}, prefix, 5*time.Second, nil)
		locktest.WantFinding(t, fs, "servers", driver.Fail, servers[0]+" standalone, "+testenv.ZKAddr(t)+" standalone")

		// Prefixes of the user "locks" only, anyone's to read only, and
		// anyone's.
		owner := connectAs(t, servers, "locks", zkLockPW)
		own, readOnly := testPrefix(), testPrefix()
		if _, err := owner.Create(path.Dir(own), nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatal(err)
		}
		for p, acl := range map[string][]zk.ACL{own: zk.AuthACL(zk.PermAll), readOnly: zk.WorldACL(zk.PermRead)} {
			if _, err := owner.Create(p, nil, 0, acl); err != nil {
				t.Fatal(err)
			}
		}
		locks := []zklock.Auth{{Scheme: "digest", Credential: "locks:" + zkLockPW}}
		fs = diagnose(t, servers, own, 5*time.Second, locks)
		locktest.WantFinding(t, fs, "prefix ACL", driver.OK, own+": digest:locks:cdrwa; digest:locks may create in it")
		fs = diagnose(t, servers, own, 5*time.Second, []zklock.Auth{{Scheme: "digest", Credential: "intruder:intruder-pw"}})
		locktest.WantFinding(t, fs, "prefix ACL", driver.Fail, "digest:intruder: ")
		locktest.WantFinding(t, fs, "clock", driver.OK, "not read")
		fs = diagnose(t, servers, readOnly, 5*time.Second, nil)
		locktest.WantFinding(t, fs, "prefix ACL", driver.Fail, readOnly+": world:anyone:r; unauthenticated: create "+readOnly+"/#doctor-")
		fs = diagnose(t, servers, prefix, 5*time.Second, locks)
		locktest.WantFinding(t, fs, "prefix ACL", driver.Warn, prefix+": world:anyone:cdrwa; digest:locks may create in it")
	})
}

// diagnose runs Diagnose on a driver of its own for prefix on servers,
// with the session timeout asked and the identities auth, and logs the
// findings.
func diagnose(t *testing.T, servers []string, prefix string, timeout time.Duration, auth []zklock.Auth) []driver.Finding {
	t.Helper()
	d, err := zklock.NewDriver(servers, &zklock.Options{Prefix: prefix, SessionTimeout: timeout, Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	fs := locktest.Diagnose(t, d, 10*time.Second)
	for _, f := range fs {
		t.Logf("%-5s %s: %s", f.Severity, f.Check, f.Found)
	}
	return fs
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

package zklock_test

import (
	"context"
	"errors"
	"io"
	"log"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/zklock"
)

const zkLockPW = "lock-pw-83be"

// connectAs returns a ZooKeeper client authenticated by digest as
// user:password (unauthenticated when user is empty).
func connectAs(t *testing.T, servers []string, user, password string) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect(servers, 10*time.Second, zk.WithLogger(log.New(io.Discard, "", 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if user != "" {
		if err := c.AddAuth("digest", []byte(user+":"+password)); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// TestSecured: a zk:// URL with user information authenticates by digest
// and creates its nodes for that user only (ACL creator-only): the
// conformance suite passes through it; a held lock's node cannot be
// deleted, nor a node queued beside it, by an unauthenticated client or
// by another user; another user, or a wrong password, fails to open on
// that prefix with an error that says why and shows no password.
func TestSecured(t *testing.T) {
	servers := []string{testenv.ZKAddr(t)}
	prefix := testPrefix()
	good := "zk://locks:" + zkLockPW + "@" + servers[0] + prefix + "?session_timeout=2s"
	adm := &admin{t: t, conn: connectAs(t, servers, "locks", zkLockPW)}

	t.Run("Conformance", func(t *testing.T) {
		locktest.Run(t, locktest.Harness{
			NewLocker: locktest.Opener(good),
			TakeAway: func(t *testing.T, name string) {
				t.Helper()
				(&admin{t: t, conn: adm.conn}).takeAway(prefix, name)
			},
			TTL:   suiteSession,
			Crash: func(t *testing.T, l *dlock.Locker) { l.Driver().(*zklock.Driver).Crash() },
		})
	})

	t.Run("OthersCannotTouch", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		l, err := dlock.Open(ctx, good)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		lease, err := l.Acquire(ctx, "guarded")
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(ctx)
		nodes := adm.locks(prefix, "guarded")
		if len(nodes) != 1 {
			t.Fatalf("lock nodes %v, want one", nodes)
		}
		node := prefix + "/guarded/" + nodes[0]
		for _, who := range []struct{ name, user, pw string }{
			{"an unauthenticated client", "", ""},
			{"another user", "intruder", "intruder-pw"},
			{"a wrong password", "locks", "wrong-" + zkLockPW},
		} {
			c := connectAs(t, servers, who.user, who.pw)
			if err := c.Delete(node, -1); !errors.Is(err, zk.ErrNoAuth) {
				t.Errorf("%s deleted the held lock's node: %v, want zk.ErrNoAuth", who.name, err)
			}
			if err := c.Delete(prefix+"/guarded", -1); !errors.Is(err, zk.ErrNoAuth) {
				t.Errorf("%s deleted the lock's znode: %v, want zk.ErrNoAuth", who.name, err)
			}
			if _, err := c.Create(prefix+"/guarded/_c_x-lock#", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
				t.Errorf("%s queued a node beside the lock: %v, want zk.ErrNoAuth", who.name, err)
			}
		}
		if err := lease.Err(); err != nil {
			t.Errorf("the lease after the attempts: %v", err)
		}
	})

	t.Run("BadURLs", func(t *testing.T) {
		locktest.RefusesBadURLs(t, []string{zkLockPW, "intruder-pw"}, []locktest.BadURL{
			{What: "wrong password", URL: "zk://locks:wrong-" + zkLockPW + "@" + servers[0] + prefix, Cause: "may not read"},
			{What: "another user", URL: "zk://intruder:intruder-pw@" + servers[0] + prefix, Cause: "may not read"},
			{What: "no password", URL: "zk://locks@" + servers[0] + prefix, Cause: "userinfo"},
			{What: "bad acl", URL: "zk://locks:" + zkLockPW + "@" + servers[0] + prefix + "?acl=creator:xyz", Cause: `"acl"`},
		})
	})
}

package main

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock/internal/testenv"
)

// securedBackend is a backend URL on a secured server, one with a wrong
// password, and the secrets neither may print.
type securedBackend struct {
	name       string
	url, wrong string
	secrets    []string
	// takeAway, if set, deletes the lock called name behind its holder's
	// back.
	takeAway func(name string) error
}

// setURL returns raw with its password replaced by pw.
func setPassword(t *testing.T, raw, pw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), pw)
	return u.String()
}

func query(kv ...string) string {
	q := testenv.Values(kv...)
	return q.Encode()
}

// securedBackends starts a secured server of every backend that has one:
// TLS with client certificates and a password everywhere (ZooKeeper:
// digest authentication), each user limited to dlock's prefix or
// database.
func securedBackends(t *testing.T) []securedBackend {
	pki := testenv.NewPKI(t)
	tlsQ := query("cacert", pki.CA, "cert", pki.ClientCert, "key", pki.ClientKey)
	var out []securedBackend
	add := func(name, raw string, secrets ...string) {
		out = append(out, securedBackend{name: name, url: raw, wrong: setPassword(t, raw, "wrong-"+secrets[0]), secrets: secrets})
	}

	const redisPW, redisAdmin = "cli-redis-pw-3f9a", "cli-redis-admin-77c1"
	rs := testenv.StartSecuredRedis(t, pki, redisAdmin, "locks", redisPW, "dlock:")
	add("redis", "rediss://locks:"+redisPW+"@"+rs.Addr+"?"+tlsQ, redisPW, redisAdmin)
	admin := rs.Client()
	out[len(out)-1].takeAway = func(name string) error { return admin.Del(context.Background(), "dlock:{"+name+"}").Err() }

	const etcdPW, etcdRoot = "cli-etcd-pw-12ab", "cli-etcd-root-9e0d"
	ec := testenv.StartEtcd(t, testenv.EtcdOptions{TLS: pki})
	ec.EnableAuth(etcdRoot, testenv.EtcdUser{Name: "locks", Password: etcdPW, Prefix: "dlock"})
	add("etcd", "etcds://locks:"+etcdPW+"@"+ec.Endpoints()[0]+"/dlock?"+tlsQ, etcdPW, etcdRoot)

	const zkPW = "cli-zk-pw-c4d2"
	add("zk", "zk://locks:"+zkPW+"@"+testenv.ZKAddr(t)+"/dlocktest/cli-"+newID(), zkPW)

	pg := testenv.StartSecuredPG(t)
	add("postgres", pg.URL(pg.User, pg.Password, pg.Database), pg.Password, pg.AdminPassword)

	my := testenv.StartSecuredMySQL(t)
	add("mysql", my.URL(my.User, my.Password), my.Password, my.AdminPassword)
	return out
}

// TestSecuredBackends: dlock run works on a secured server of every
// backend, and nothing that dlock run, dlock status (at the debug log
// level too) or a run with a wrong password prints holds a password.
func TestSecuredBackends(t *testing.T) {
	c := newCLI(t)
	for _, b := range securedBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			check := func(what string, r result) {
				t.Helper()
				for _, s := range b.secrets {
					if strings.Contains(r.stdout+r.stderr, s) {
						t.Errorf("%s printed a password:\nstdout: %s\nstderr: %s", what, r.stdout, r.stderr)
					}
				}
			}
			r := c.run("run", "--backend", b.url, "--log-level", "debug", "--no-wait", "secured-job", "--", "echo", "ran")
			check("dlock run", r)
			if r.code != 0 || !strings.Contains(r.stdout, "ran") {
				t.Fatalf("dlock run on %s: exit %d, stdout %q, stderr %q", b.name, r.code, r.stdout, r.stderr)
			}
			r = c.run("status", "--backend", b.url, "--log-level", "debug", "secured")
			check("dlock status", r)
			t.Logf("dlock status: exit %d; %s", r.code, strings.TrimSpace(r.stdout+r.stderr))
			r = c.run("run", "--backend", b.wrong, "--log-level", "debug", "--no-wait", "secured-job", "--", "echo", "ran")
			check("dlock run with a wrong password", r)
			if r.code == 0 {
				t.Errorf("dlock run with a wrong password succeeded: %s", r.stdout)
			}
			t.Logf("wrong password: exit %d: %s", r.code, strings.TrimSpace(r.stderr))
			if b.takeAway == nil {
				return
			}
			// A lost lock: what dlock run says about it holds no secret.
			p := c.start("run", "--backend", b.url, "--log-level", "debug", "--ttl", "600ms", "secured-lost", "--",
				"sh", "-c", "echo started; exec sleep 30")
			if line := p.line(30 * time.Second); line != "started" {
				t.Fatalf("the command printed %q", line)
			}
			if err := b.takeAway("secured-lost"); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(30 * time.Second); code != exitLost {
				t.Errorf("dlock run exited %d after its lock was taken away, want %d", code, exitLost)
			}
			check("dlock run losing its lock", result{stderr: p.stderr.String()})
		})
	}
}

// TestBadURLHidesPassword: a backend URL that does not parse may hold a
// password, and so may the parser's error: neither is printed.
func TestBadURLHidesPassword(t *testing.T) {
	r := newCLI(t).run("run", "--backend", "redis://locks:s3cr%zzet@127.0.0.1:6379", "job", "--", "true")
	if r.code == 0 || strings.Contains(r.stdout+r.stderr, "s3cr") || strings.Contains(r.stdout+r.stderr, "zzet") {
		t.Errorf("exit %d, stdout %q, stderr %q: want a failure that shows no part of the password", r.code, r.stdout, r.stderr)
	}
	t.Log(strings.TrimSpace(r.stderr))
}

// TestHelpHidesBackendPassword: --help names $DLOCK_BACKEND but never
// prints its value, which may hold a password.
func TestHelpHidesBackendPassword(t *testing.T) {
	c := newCLI(t)
	for _, cmd := range []string{"run", "status", "bench", "demo"} {
		x := c.command(cmd, "--help")
		x.Env = append(x.Env, "DLOCK_BACKEND=redis://locks:help-s3cret@127.0.0.1:1")
		out, _ := x.CombinedOutput()
		if strings.Contains(string(out), "help-s3cret") {
			t.Errorf("dlock %s --help printed the backend's password:\n%s", cmd, out)
		}
	}
}

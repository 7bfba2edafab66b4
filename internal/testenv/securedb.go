package testenv

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// SecuredPG is a private PostgreSQL server a test started on a free
// loopback port: TLS only (hostssl), SCRAM passwords, and client
// certificates its PKI's CA signed required of every connection. Its
// superuser is postgres with AdminPassword; it has a role User with
// Password, owner of the database Database and nothing else.
type SecuredPG struct {
	Addr           string
	PKI            *PKI
	AdminPassword  string
	User, Password string
	Database       string
	process
}

// StartSecuredPG starts a SecuredPG with a fresh PKI, stopped when t
// ends. It needs the PostgreSQL server binaries (scripts/services.sh
// installs them) and the postgres system user, under which the server
// runs.
func StartSecuredPG(t testing.TB) *SecuredPG {
	t.Helper()
	bin := pgBinDir(t)
	uid, gid := systemUser(t, "postgres")
	s := &SecuredPG{PKI: NewPKI(t), AdminPassword: "pg-admin-pw-1c7e", User: "locks", Password: "pg-lock-pw-92d0",
		Database: "locks"}
	dir := serverDir(t, &s.process, "pg", s.PKI)
	pwfile := filepath.Join(dir, "pw")
	must(t, os.WriteFile(pwfile, []byte(s.AdminPassword+"\n"), 0o600))
	must(t, chownTree(dir, uid, gid))
	data := filepath.Join(dir, "data")
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command("runuser", append([]string{"-u", "postgres", "--", filepath.Join(bin, name)}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
	}
	run("initdb", "-D", data, "-U", "postgres", "--pwfile", pwfile, "-A", "scram-sha-256", "--no-sync")
	hba := "hostssl all all 127.0.0.1/32 scram-sha-256 clientcert=verify-ca\n"
	must(t, os.WriteFile(filepath.Join(data, "pg_hba.conf"), []byte(hba), 0o600))
	must(t, chownTree(data, uid, gid))
	port := freePort(t)
	s.Addr = "127.0.0.1:" + strconv.Itoa(port)
	admin := s.URL("postgres", s.AdminPassword, "postgres")
	s.t, s.what, s.timeout = t, "the secured postgres", 30*time.Second
	s.ready = func() error { return pingPG(admin) }
	s.newCmd = func() *exec.Cmd {
		return exec.Command("runuser", "-u", "postgres", "--", filepath.Join(bin, "postgres"), "-D", data,
			"-p", strconv.Itoa(port), "-k", dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
			"-c", "ssl=on", "-c", "ssl_cert_file="+filepath.Join(dir, "server.pem"),
			"-c", "ssl_key_file="+filepath.Join(dir, "server-key.pem"), "-c", "ssl_ca_file="+filepath.Join(dir, "ca.pem"))
	}
	s.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for _, q := range []string{
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", s.User, s.Password),
		fmt.Sprintf("CREATE DATABASE %s OWNER %s", s.Database, s.User),
		fmt.Sprintf("REVOKE ALL ON DATABASE %s FROM PUBLIC", s.Database),
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return s
}

// URL returns a postgres:// URL of user with password on database, with
// sslmode=verify-full, the PKI's CA and its client certificate; kv are
// parameters (name, value, ...) that replace those, an empty value
// removing one.
func (s *SecuredPG) URL(user, password, database string, kv ...string) string {
	q := url.Values{"sslmode": {"verify-full"}, "sslrootcert": {s.PKI.CA}, "sslcert": {s.PKI.ClientCert},
		"sslkey": {s.PKI.ClientKey}, "connect_timeout": {"5"}}
	override(q, kv)
	u := url.URL{Scheme: "postgres", User: url.UserPassword(user, password), Host: s.Addr, Path: "/" + database,
		RawQuery: q.Encode()}
	return u.String()
}

// serverDir makes the directory of a private server, process p, removed
// (after p is killed) when t ends, with p's log and with the PKI's server
// certificate, key and CA as server.pem, server-key.pem and ca.pem,
// readable by their owner only (servers refuse a key others can read).
func serverDir(t testing.TB, p *process, name string, pki *PKI) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dlock-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	p.logPath = filepath.Join(dir, "server.log")
	t.Cleanup(func() { p.Kill(); _ = os.RemoveAll(dir) })
	for _, f := range []struct{ from, to string }{{pki.ServerCert, "server.pem"}, {pki.ServerKey, "server-key.pem"}, {pki.CA, "ca.pem"}} {
		b, err := os.ReadFile(f.from)
		if err != nil {
			t.Fatal(err)
		}
		must(t, os.WriteFile(filepath.Join(dir, f.to), b, 0o600))
	}
	return dir
}

// override sets the parameters kv (name, value, ...) in q, an empty
// value removing one.
func override(q url.Values, kv []string) {
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			q.Del(kv[i])
		} else {
			q.Set(kv[i], kv[i+1])
		}
	}
}

// pgBinDir returns the newest PostgreSQL server's binary directory.
func pgBinDir(t testing.TB) string {
	t.Helper()
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	if len(dirs) == 0 {
		t.Fatalf("no PostgreSQL server binaries in /usr/lib/postgresql; install them with %s", ServicesScript)
	}
	sort.Slice(dirs, func(i, j int) bool {
		a, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		b, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return a < b
	})
	return dirs[len(dirs)-1]
}

// systemUser returns the uid and gid of a system user the servers run as.
func systemUser(t testing.TB, name string) (int, int) {
	t.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatalf("system user %s: %v; install the server with %s", name, err, ServicesScript)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return uid, gid
}

// chownTree gives dir and everything in it to uid:gid.
func chownTree(dir string, uid, gid int) error {
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(p, uid, gid)
	})
}

// SecuredMySQL is a private MariaDB server a test started on a free
// loopback port, with require_secure_transport: its user User (Password)
// must connect over TLS with a client certificate its PKI's CA signed
// (REQUIRE X509) and may use the database Database only; Admin (with
// AdminPassword) has every privilege, over TLS.
type SecuredMySQL struct {
	Addr                 string
	PKI                  *PKI
	Admin, AdminPassword string
	User, Password       string
	Database             string
	process
}

// StartSecuredMySQL starts a SecuredMySQL with a fresh PKI, stopped when
// t ends. It needs mariadbd and mariadb-install-db (scripts/services.sh
// installs them) and the mysql system user, under which the server runs.
func StartSecuredMySQL(t testing.TB) *SecuredMySQL {
	t.Helper()
	for _, bin := range []string{"mariadbd", "mariadb-install-db", "mariadb"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found (%v); install it with %s", bin, err, ServicesScript)
		}
	}
	uid, gid := systemUser(t, "mysql")
	s := &SecuredMySQL{PKI: NewPKI(t), Admin: "admin", AdminPassword: "my-admin-pw-5a0c", User: "locks",
		Password: "my-lock-pw-e71b", Database: "locks"}
	dir := serverDir(t, &s.process, "mysql", s.PKI)
	data := filepath.Join(dir, "data")
	must(t, os.Mkdir(data, 0o700))
	must(t, chownTree(dir, uid, gid))
	if out, err := exec.Command("mariadb-install-db", "--no-defaults", "--user=mysql", "--datadir="+data,
		"--skip-test-db", "--auth-root-authentication-method=socket").CombinedOutput(); err != nil {
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
	port := freePort(t)
	s.Addr = "127.0.0.1:" + strconv.Itoa(port)
	sock := filepath.Join(dir, "mysqld.sock")
	s.t, s.what, s.timeout = t, "the secured MariaDB", 60*time.Second
	s.newCmd = func() *exec.Cmd {
		return exec.Command("mariadbd", "--no-defaults", "--user=mysql", "--datadir="+data, "--port="+strconv.Itoa(port),
			"--bind-address=127.0.0.1", "--socket="+sock, "--pid-file="+filepath.Join(dir, "mysqld.pid"),
			"--skip-log-bin", "--innodb-buffer-pool-size=16M", "--innodb-flush-log-at-trx-commit=2",
			"--ssl-ca="+filepath.Join(dir, "ca.pem"), "--ssl-cert="+filepath.Join(dir, "server.pem"),
			"--ssl-key="+filepath.Join(dir, "server-key.pem"), "--require-secure-transport=ON")
	}
	sql := fmt.Sprintf(`CREATE DATABASE %[1]s;
CREATE USER '%[2]s'@'127.0.0.1' IDENTIFIED BY '%[3]s' REQUIRE X509;
GRANT ALL ON %[1]s.* TO '%[2]s'@'127.0.0.1';
CREATE USER '%[4]s'@'127.0.0.1' IDENTIFIED BY '%[5]s' REQUIRE SSL;
GRANT ALL ON *.* TO '%[4]s'@'127.0.0.1' WITH GRANT OPTION;`, s.Database, s.User, s.Password, s.Admin, s.AdminPassword)
	s.ready = func() error {
		out, err := exec.Command("mariadb", "--no-defaults", "--protocol=socket", "--socket="+sock, "-uroot", "-e", sql).CombinedOutput()
		if err != nil {
			return fmt.Errorf("users not taken: %v: %s", err, out)
		}
		return nil
	}
	s.Start()
	return s
}

// URL returns a mysql:// URL of user with password on the database, with
// the PKI's CA and client certificate; kv are parameters (name, value,
// ...) that replace those, an empty value removing one.
func (s *SecuredMySQL) URL(user, password string, kv ...string) string {
	q := url.Values{"cacert": {s.PKI.CA}, "cert": {s.PKI.ClientCert}, "key": {s.PKI.ClientKey}, "timeout": {"5s"}}
	override(q, kv)
	u := url.URL{Scheme: "mysql", User: url.UserPassword(user, password), Host: s.Addr, Path: "/" + s.Database,
		RawQuery: q.Encode()}
	return u.String()
}

// Values returns the URL parameters kv (name, value, ...).
func Values(kv ...string) url.Values {
	q := url.Values{}
	override(q, kv)
	return q
}

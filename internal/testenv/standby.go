package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// PGStandby is a private PostgreSQL primary and a hot standby streaming
// from it, on free loopback ports, trust authentication, stopped when the
// test ends: what a URL pointing at a read replica reaches.
type PGStandby struct {
	Primary, Standby string // postgres:// URLs of each, database postgres
	primary, standby process
}

// StartPGStandby starts a PGStandby (initdb, the primary, pg_basebackup
// -R, the standby) and waits until the standby accepts connections. It
// needs the PostgreSQL server binaries (scripts/services.sh installs them)
// and the postgres system user, under which both run.
func StartPGStandby(t testing.TB) *PGStandby {
	t.Helper()
	bin := pgBinDir(t)
	uid, gid := systemUser(t, "postgres")
	dir, err := os.MkdirTemp("", "dlock-pgstandby-")
	if err != nil {
		t.Fatal(err)
	}
	s := &PGStandby{}
	t.Cleanup(func() { s.standby.Kill(); s.primary.Kill(); _ = os.RemoveAll(dir) })
	must(t, os.Chown(dir, uid, gid))
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command("runuser", append([]string{"-u", "postgres", "--", filepath.Join(bin, name)}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
	}
	primary, standby := filepath.Join(dir, "primary"), filepath.Join(dir, "standby")
	run("initdb", "-D", primary, "-U", "postgres", "-A", "trust", "--no-sync")
	hba := "local all all trust\nhost all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n"
	must(t, os.WriteFile(filepath.Join(primary, "pg_hba.conf"), []byte(hba), 0o600))
	must(t, chownTree(primary, uid, gid))
	ports := freePortsFor(t, 2)
	pport, sport := ports[0], ports[1]
	s.Primary = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=5", pport)
	s.Standby = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=5", sport)
	server := func(p *process, data, what, url string, port int) {
		p.t, p.what, p.timeout, p.logPath = t, what, 30*time.Second, filepath.Join(dir, what+".log")
		p.ready = func() error { return pingPG(url) }
		p.newCmd = func() *exec.Cmd {
			return exec.Command("runuser", "-u", "postgres", "--", filepath.Join(bin, "postgres"), "-D", data,
				"-p", strconv.Itoa(port), "-k", dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off")
		}
		p.Start()
	}
	server(&s.primary, primary, "primary", s.Primary, pport)
	run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(pport), "-U", "postgres", "-D", standby, "-R", "--no-sync")
	server(&s.standby, standby, "standby", s.Standby, sport)
	return s
}

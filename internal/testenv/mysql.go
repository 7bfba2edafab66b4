package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// DefaultMySQLDSN is the go-sql-driver DSN of the shared MariaDB/MySQL
// server when DLOCK_MYSQL_DSN is unset: root without a password, database
// test, on loopback.
const DefaultMySQLDSN = "root@tcp(127.0.0.1:3306)/test"

// MySQLDSN returns the go-sql-driver DSN of the shared MariaDB/MySQL
// server (DLOCK_MYSQL_DSN, default DefaultMySQLDSN) after checking that it
// answers and that its address is a loopback one; it fails t otherwise,
// naming the script that starts the server. It is never skipped.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	dsn := Getenv("DLOCK_MYSQL_DSN", DefaultMySQLDSN)
	cfg, err := MySQLConfig(dsn)
	if err != nil {
		t.Fatalf("DLOCK_MYSQL_DSN=%q: %v", dsn, err)
	}
	if err := pingMySQL(cfg); err != nil {
		t.Fatalf("MySQL/MariaDB at %s (DLOCK_MYSQL_DSN) does not answer: %v; start it with %s", cfg.Addr, err, ServicesScript)
	}
	return dsn
}

// MySQLConfig parses dsn and checks that it names a loopback TCP address or
// a Unix socket: the tests KILL connections and create tables, which they
// must never do to a server elsewhere.
func MySQLConfig(dsn string) (*mysql.Config, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	if cfg.Net == "unix" {
		return cfg, nil
	}
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("address %q: %w", cfg.Addr, err)
	}
	if !loopback(strings.Trim(host, "[]")) {
		return nil, fmt.Errorf("address %q is not a loopback address", cfg.Addr)
	}
	return cfg, nil
}

// MySQLDB returns a *sql.DB on the shared server (see MySQLDSN), closed when
// t ends.
func MySQLDB(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func pingMySQL(cfg *mysql.Config) error {
	cfg = cfg.Clone()
	cfg.Timeout = 2 * time.Second
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(c)
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

// MySQLURL returns the shared server's DSN (MySQLDSN) as a mysql:// URL.
func MySQLURL(t testing.TB) string {
	t.Helper()
	cfg, err := MySQLConfig(MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	u := "mysql://" + cfg.User
	if cfg.Passwd != "" {
		u += ":" + cfg.Passwd
	}
	return u + "@" + cfg.Addr + "/" + cfg.DBName
}

// Package testenv finds and starts the real servers dlock's tests run
// against. Addresses come from environment variables with loopback
// defaults. A server that is needed but missing fails the test, with a
// message naming the script that starts it: it is never skipped, so a
// green run always means the backend was really tested.
package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// ServicesScript starts every server the tests need.
const ServicesScript = "scripts/services.sh"

// RedisAddr returns the address of the shared Redis server
// (DLOCK_REDIS_ADDR, default 127.0.0.1:6379) after checking that it
// answers; it fails t otherwise.
func RedisAddr(t testing.TB) string {
	t.Helper()
	return shared(t, "Redis", "DLOCK_REDIS_ADDR", "127.0.0.1:6379", func(addr string) error {
		return pingRedisWith(&redis.Options{Addr: addr})
	})
}

// RedisClient returns a client of the shared Redis server, closed when t ends.
func RedisClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: RedisAddr(t)})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Getenv returns the environment variable key, or def when it is unset.
func Getenv(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}

// shared returns the address of a shared server, the environment
// variable env or def, after checking with ping that it answers; it fails
// t otherwise, naming the script that starts the server.
func shared(t testing.TB, what, env, def string, ping func(string) error) string {
	t.Helper()
	v := Getenv(env, def)
	if err := ping(v); err != nil {
		t.Fatalf("%s at %s (%s) does not answer: %v; start it with %s", what, v, env, err, ServicesScript)
	}
	return v
}

// pingRedisWith pings the server o names, with o's credentials and TLS.
func pingRedisWith(o *redis.Options) error {
	o.MaxRetries, o.DialTimeout = -1, time.Second
	c := redis.NewClient(o)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

// DefaultPGURL is the PostgreSQL server the tests use unless DLOCK_PG_URL
// names another.
const DefaultPGURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// PGURL returns the URL of the shared PostgreSQL server (DLOCK_PG_URL,
// default DefaultPGURL) after checking that it answers; it fails t
// otherwise.
func PGURL(t testing.TB) string {
	t.Helper()
	return shared(t, "PostgreSQL", "DLOCK_PG_URL", DefaultPGURL, pingPG)
}

// PGConn returns a connection to the shared PostgreSQL server, closed when
// t ends.
func PGConn(t testing.TB) *pgx.Conn {
	t.Helper()
	u := PGURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatalf("connect to PostgreSQL at %s: %v", u, err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func pingPG(u string) error {
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		return err
	}
	cfg.ConnectTimeout = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	return c.Ping(ctx)
}

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

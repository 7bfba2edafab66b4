package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultPGURL is the PostgreSQL server the tests use unless DLOCK_PG_URL
// names another.
const DefaultPGURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// PGURL returns the URL of the shared PostgreSQL server (DLOCK_PG_URL,
// default DefaultPGURL) after checking that it answers; it fails t
// otherwise.
func PGURL(t testing.TB) string {
	t.Helper()
	u := Getenv("DLOCK_PG_URL", DefaultPGURL)
	if err := pingPG(u); err != nil {
		t.Fatalf("PostgreSQL at %s (DLOCK_PG_URL) does not answer: %v; start it with %s", u, err, ServicesScript)
	}
	return u
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

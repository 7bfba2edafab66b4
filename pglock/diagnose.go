package pglock

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/doctor"
)

// Diagnose implements driver.Diagnoser on a connection of its own, which
// it closes: the round trip and the server's clock (clock_timestamp()),
// whether the server is a standby (pg_is_in_recovery()), whether the
// session is read-only (default_transaction_read_only), and the token
// table and sequence: there with the privileges a grant needs, or
// creatable. It only reads.
func (d *Driver) Diagnose(ctx context.Context, ttl time.Duration) ([]driver.Finding, error) {
	c, err := pgx.ConnectConfig(ctx, d.cfg.Copy())
	if err != nil {
		return nil, fmt.Errorf("pglock: connect: %w", err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	fs, err := doctor.Clock(ctx, ttl, "docs/POSTGRES.md", func(ctx context.Context) (t time.Time, err error) {
		err = c.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&t)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("pglock: %w", err)
	}
	const doc = "docs/POSTGRES.md#doctor"
	var recovery bool
	var readOnly, version string
	if err := c.QueryRow(ctx, "SELECT pg_is_in_recovery(), current_setting('default_transaction_read_only'), current_setting('server_version')").
		Scan(&recovery, &readOnly, &version); err != nil {
		return nil, fmt.Errorf("pglock: %w", err)
	}
	f := driver.Finding{Check: "standby", Found: "a primary, PostgreSQL " + version, Doc: doc}
	if recovery {
		f.Severity = driver.Fail
		f.Found = "a standby in recovery, PostgreSQL " + version
		f.Why = "Advisory locks live on the server that grants them: two clients on two servers both get the lock, and a standby refuses the token's writes"
		f.Fix = "Point the URL at the primary (target_session_attrs=read-write picks it from a list of hosts)"
	}
	fs = append(fs, f)
	f = driver.Finding{Check: "read-only session", Found: "default_transaction_read_only " + readOnly, Doc: doc}
	if readOnly == "on" {
		f.Severity = driver.Fail
		f.Why = "Every grant writes its fencing token: each acquisition fails"
		f.Fix = "Drop default_transaction_read_only for this role, database or URL (ALTER ROLE ... SET default_transaction_read_only = off)"
	}
	fs = append(fs, f)
	return append(fs, d.tableFinding(ctx, c, doc)), nil
}

// tableFinding judges the token table and its sequence: present with the
// privileges a grant uses, or creatable.
func (d *Driver) tableFinding(ctx context.Context, c *pgx.Conn, doc string) driver.Finding {
	table := d.st.table
	f := driver.Finding{Check: "token table", Doc: doc}
	var exists, tablePriv, seqPriv, canCreate bool
	err := c.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL,
		to_regclass($1) IS NOT NULL AND has_table_privilege($1, 'SELECT, INSERT, UPDATE'),
		to_regclass($2) IS NOT NULL AND has_sequence_privilege($2, 'USAGE'),
		has_schema_privilege(current_schema(), 'CREATE')`, table, table+seqSuffix).
		Scan(&exists, &tablePriv, &seqPriv, &canCreate)
	switch {
	case err != nil:
		f.Severity, f.Found = driver.Warn, "cannot read: "+err.Error()
		f.Why = "Whether grants can write their fencing tokens is not known"
	case exists && tablePriv && seqPriv:
		f.Found = table + " and " + table + seqSuffix + ", with SELECT, INSERT, UPDATE and USAGE"
	case exists:
		f.Severity = driver.Fail
		f.Found = table + " without SELECT, INSERT and UPDATE on it, or USAGE on " + table + seqSuffix
		f.Why = "Every grant writes its fencing token there: each acquisition fails"
		f.Fix = fmt.Sprintf("GRANT SELECT, INSERT, UPDATE ON %s TO the role; GRANT USAGE ON SEQUENCE %s%s TO the role", table, table, seqSuffix)
	case canCreate:
		f.Found = table + " does not exist; the role may create it, as the first open does (migrate)"
	default:
		f.Severity = driver.Fail
		f.Found = table + " does not exist, and the role may not create it"
		f.Why = "Every grant writes its fencing token there: each acquisition fails"
		f.Fix = "Create it once with a role that may (pglock.Migrate, or the statements in docs/POSTGRES.md), then grant SELECT, INSERT, UPDATE and the sequence's USAGE"
	}
	return f
}

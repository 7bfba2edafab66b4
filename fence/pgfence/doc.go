// Package pgfence fences writes to PostgreSQL with dlock's fencing
// tokens: a table keeps the highest token seen for each resource, and
// Admit checks and raises it in one statement, inside the caller's
// transaction, so that the business write and the token check commit (or
// roll back) together.
//
//	tx, _ := db.BeginTx(ctx, nil)
//	defer tx.Rollback()
//	if err := pgfence.Admit(ctx, tx, "orders/42", lease.Token()); err != nil {
//		return err // errors.Is(err, fence.ErrStale): a later holder has written
//	}
//	// ... the business write, in tx ...
//	return tx.Commit()
//
// Admit's upsert locks the resource's row until the transaction ends, so
// transactions that write the same resource are serialized on it: one
// with a lower token that comes second sees the higher token committed by
// the first and is rejected; one that comes first is committed before the
// higher one may proceed. A stale transaction is rejected before its
// write, and the caller rolls it back.
//
// The package uses only database/sql, so it works with any PostgreSQL
// driver (pgx's stdlib driver, lib/pq). Tokens are stored as bigint:
// tokens above math.MaxInt64 are refused.
package pgfence

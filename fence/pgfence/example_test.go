package pgfence_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/dlockgo/dlock/fence"
	"github.com/dlockgo/dlock/fence/pgfence"
	"github.com/dlockgo/dlock/internal/testenv"
)

// The holder of a lock on an order writes it in a transaction that also
// admits the lease's token. A holder that was paused past its TTL comes
// back with an older token after its successor has written: its
// transaction is rejected and rolled back, and the order keeps the
// successor's status.
func Example() {
	ctx := context.Background()
	db, err := sql.Open("pgx", testenv.Getenv("DLOCK_PG_URL", testenv.DefaultPGURL))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	if err := pgfence.CreateTable(ctx, db); err != nil {
		fmt.Println(err)
		return
	}
	orders := "pgfence_example_" + rand.Text()[:8] // the business table
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+orders+` (id int PRIMARY KEY, status text)`); err != nil {
		fmt.Println(err)
		return
	}
	defer db.ExecContext(ctx, `DROP TABLE `+orders)
	db.ExecContext(ctx, `INSERT INTO `+orders+` VALUES (42, 'new')`)
	resource := orders + "/42"

	// setStatus is what a lock holder runs with its lease's token.
	setStatus := func(token uint64, status string) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // a no-op after Commit
		if err := pgfence.Admit(ctx, tx, resource, token); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE `+orders+` SET status = $1 WHERE id = 42`, status); err != nil {
			return err
		}
		return tx.Commit()
	}

	fmt.Println(setStatus(8, "shipped")) // the successor, token 8
	err = setStatus(7, "cancelled")      // the paused holder, token 7
	var se *fence.StaleError
	if errors.As(err, &se) {
		fmt.Printf("rejected token %d: token %d was already seen\n", se.Token, se.Highest)
	}
	var status string
	db.QueryRowContext(ctx, `SELECT status FROM `+orders+` WHERE id = 42`).Scan(&status)
	fmt.Println("status:", status)
	// Output:
	// <nil>
	// rejected token 7: token 8 was already seen
	// status: shipped
}

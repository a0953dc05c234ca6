package store

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/gpumarket/gpumarket/market"
)

// insertEntries appends ledger entries; an entry whose idempotency key is
// already in the ledger is the same movement recorded before and is skipped.
func insertEntries(ctx context.Context, tx *sql.Tx, entries []market.LedgerEntry) error {
	for _, e := range entries {
		if e.Amount <= 0 || e.IdempotencyKey == "" {
			return fmt.Errorf("ledger entry %q of %d: needs a key and a positive amount", e.IdempotencyKey, e.Amount)
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO ledger_entries (reservation_id, kind, debit_account, credit_account,
			amount_cents, stripe_ref, idempotency_key, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (idempotency_key) DO NOTHING`,
			e.ReservationID, e.Kind, e.Debit, e.Credit, int64(e.Amount), e.StripeRef, e.IdempotencyKey, unix(e.At))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err != nil {
				return err
			}
			continue // a replay: already recorded and audited
		}
		if err := moneyMoved(ctx, tx, e); err != nil {
			return err
		}
	}
	return nil
}

func queryLedger(ctx context.Context, q querier, where string, args ...any) ([]market.LedgerEntry, error) {
	rows, err := q.QueryContext(ctx, `SELECT reservation_id, kind, debit_account, credit_account, amount_cents, stripe_ref,
		idempotency_key, at FROM ledger_entries `+where+` ORDER BY id`, args...)
	if err != nil {
		return nil, err
	}
	var out []market.LedgerEntry
	for rows.Next() {
		var e market.LedgerEntry
		var amount, at int64
		if err := rows.Scan(&e.ReservationID, &e.Kind, &e.Debit, &e.Credit, &amount, &e.StripeRef, &e.IdempotencyKey, &at); err != nil {
			rows.Close()
			return nil, err
		}
		e.Amount, e.At = market.Cents(amount), fromUnix(at)
		out = append(out, e)
	}
	return out, closeRows(rows)
}

// ListLedger returns a reservation's ledger entries in the order written.
func (db *DB) ListLedger(ctx context.Context, reservationID int64) ([]market.LedgerEntry, error) {
	const op = "list ledger"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	es, err := queryLedger(ctx, tx, `WHERE reservation_id = ?`, reservationID)
	return es, fail(op, err, "")
}

// ListAllLedger returns the whole ledger in the order written.
func (db *DB) ListAllLedger(ctx context.Context) ([]market.LedgerEntry, error) {
	const op = "list all ledger"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	es, err := queryLedger(ctx, tx, ``)
	return es, fail(op, err, "")
}

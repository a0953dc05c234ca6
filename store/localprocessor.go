package store

import (
	"context"
	"database/sql"
	"errors"

	"github.com/gpumarket/gpumarket/market"
)

// The local test processor's objects (billing.Local): the store keeps them
// as billing hands them over and reads none of their data; it implements
// billing.LocalStore without importing billing.

const msgLocalObjectNotFound = "That simulated payment object could not be found."

// CreateLocalObject stores an object of the local test processor unless one
// of the same kind and id exists, and returns the data stored under that
// id: data itself, or the earlier object's, for the processor to compare (a
// retried call, or an idempotency key reused with other arguments).
func (db *DB) CreateLocalObject(ctx context.Context, kind, id, idempotencyKey, parentID string, amount market.Cents, data []byte) ([]byte, error) {
	const op = "create local processor object"
	tx, err := db.begin(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()

	if _, err := tx.ExecContext(ctx, `
		INSERT INTO local_processor_objects (kind, id, idempotency_key, parent_id, amount_cents, data)
		VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (kind, id) DO NOTHING`,
		kind, id, idempotencyKey, parentID, int64(amount), string(data)); err != nil {
		return nil, fail(op, err, "That idempotency key already made another simulated payment object.")
	}
	var stored string
	if err := tx.QueryRowContext(ctx, `SELECT data FROM local_processor_objects WHERE kind = ? AND id = ?`, kind, id).Scan(&stored); err != nil {
		return nil, fail(op, err, "")
	}
	if err := tx.Commit(); err != nil {
		return nil, fail(op, err, "")
	}
	return []byte(stored), nil
}

// UpdateLocalObject replaces the data of a stored object of the local test
// processor; its kind, id, key, parent and amount stay.
func (db *DB) UpdateLocalObject(ctx context.Context, kind, id string, data []byte) error {
	const op = "update local processor object"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()

	res, err := tx.ExecContext(ctx, `UPDATE local_processor_objects SET data = ? WHERE kind = ? AND id = ?`, string(data), kind, id)
	if err != nil {
		return fail(op, err, "")
	}
	if n, err := res.RowsAffected(); err != nil {
		return fail(op, err, "")
	} else if n == 0 {
		return notFound(msgLocalObjectNotFound)
	}
	return fail(op, tx.Commit(), "")
}

// FindLocalObject returns the data of a stored object of the local test
// processor, or a not-found error.
func (db *DB) FindLocalObject(ctx context.Context, kind, id string) ([]byte, error) {
	var data string
	err := db.reader.QueryRowContext(ctx, `SELECT data FROM local_processor_objects WHERE kind = ? AND id = ?`, kind, id).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound(msgLocalObjectNotFound)
	}
	if err != nil {
		return nil, fail("find local processor object", err, "")
	}
	return []byte(data), nil
}

// SumLocalAmounts returns the total amount of the local test processor's
// objects of one kind that belong to parentID, e.g. everything refunded of
// one payment.
func (db *DB) SumLocalAmounts(ctx context.Context, kind, parentID string) (market.Cents, error) {
	var sum int64
	err := db.reader.QueryRowContext(ctx, `
		SELECT COALESCE(SUM(amount_cents), 0) FROM local_processor_objects WHERE kind = ? AND parent_id = ?`,
		kind, parentID).Scan(&sum)
	if err != nil {
		return 0, fail("sum local processor amounts", err, "")
	}
	return market.Cents(sum), nil
}

// ListLocalObjects returns every stored object of the local test processor
// of one kind, by id: their ids and data.
func (db *DB) ListLocalObjects(ctx context.Context, kind string) ([]string, [][]byte, error) {
	const op = "list local processor objects"
	rows, err := db.reader.QueryContext(ctx, `SELECT id, data FROM local_processor_objects WHERE kind = ? ORDER BY id`, kind)
	if err != nil {
		return nil, nil, fail(op, err, "")
	}
	defer rows.Close()
	var ids []string
	var data [][]byte
	for rows.Next() {
		var id, d string
		if err := rows.Scan(&id, &d); err != nil {
			return nil, nil, fail(op, err, "")
		}
		ids, data = append(ids, id), append(data, []byte(d))
	}
	return ids, data, fail(op, rows.Err(), "")
}

package store

import (
	"context"
	"time"
)

// TakeLease gives the named lease to holder until now+ttl when it is free,
// expired or already holder's, and reports whether holder has it. The
// holder renews it by taking it again before it expires. Times are each
// replica's clock: replicas whose clocks differ by more than ttl could
// both believe they hold it, so ttl should be well above the clock skew.
func (db *DB) TakeLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (bool, error) {
	const op = "take lease"
	tx, err := db.begin(ctx)
	if err != nil {
		return false, fail(op, err, "")
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `INSERT INTO leases (name, holder, expires_at) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
		WHERE leases.holder = excluded.holder OR leases.expires_at <= ?`,
		name, holder, unix(now.Add(ttl)), unix(now))
	if err != nil {
		return false, fail(op, err, "")
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fail(op, err, "")
	}
	return n == 1, fail(op, tx.Commit(), "")
}

// ReleaseLease gives the lease up if holder has it, so another replica
// takes it at its next tick instead of waiting for it to expire.
func (db *DB) ReleaseLease(ctx context.Context, name, holder string) error {
	const op = "release lease"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE leases SET expires_at = 0 WHERE name = ? AND holder = ?`, name, holder); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// LeaseHolder returns who holds the named lease at now, or "" when no one
// does.
func (db *DB) LeaseHolder(ctx context.Context, name string, now time.Time) (string, error) {
	var holder string
	err := db.reader.QueryRowContext(ctx, `SELECT COALESCE(MAX(holder), '') FROM leases WHERE name = ? AND expires_at > ?`,
		name, unix(now)).Scan(&holder)
	return holder, fail("find lease holder", err, "")
}

package store

import (
	"context"
	"fmt"
	"time"
)

// ThrottleHit records an attempt for key (e.g. "login-ip:1.2.3.4",
// "login-acct:a@b.c") at now and reports whether it is allowed: an attempt is
// refused when it would be more than limit attempts within the trailing
// window (now-window, now]. A refused attempt is not recorded, so retryAfter
// is exact: it is how long until enough in-window attempts have left the
// window for the next attempt to be allowed. Rows of the key that have left
// the window are pruned. Times have one-second resolution, windows round up
// to whole seconds. The check runs in the database, so it holds across
// replicas.
func (db *DB) ThrottleHit(ctx context.Context, key string, now time.Time, window time.Duration, limit int) (allowed bool, retryAfter time.Duration, err error) {
	const op = "throttle hit"
	if limit < 1 || window <= 0 {
		return false, 0, fmt.Errorf("store: %s: limit %d and window %s must be positive", op, limit, window)
	}
	windowS := int64((window + time.Second - 1) / time.Second)
	nowS := unix(now)

	tx, err := db.begin(ctx)
	if err != nil {
		return false, 0, fail(op, err, "")
	}
	defer tx.Rollback()

	if _, err := tx.ExecContext(ctx, `DELETE FROM throttle_hits WHERE throttle_key = ? AND at <= ?`, key, nowS-windowS); err != nil {
		return false, 0, fail(op, err, "")
	}
	hits, err := throttleHits(ctx, tx, key, nowS-windowS)
	if err != nil {
		return false, 0, fail(op, err, "")
	}
	if len(hits) >= limit {
		// The attempt becomes allowed once only limit-1 remain in the window,
		// that is once hit number len(hits)-limit (oldest first) has left it.
		leaves := fromUnix(hits[len(hits)-limit] + windowS)
		return false, leaves.Sub(now), nil
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO throttle_hits (throttle_key, at) VALUES (?, ?)`, key, nowS); err != nil {
		return false, 0, fail(op, err, "")
	}
	if err := tx.Commit(); err != nil {
		return false, 0, fail(op, err, "")
	}
	return true, 0, nil
}

// ThrottlePeek reports, without recording anything, whether key already has
// limit or more attempts within the trailing window, and if so how long until
// the next attempt would be allowed. Use it to refuse early when only failed
// attempts are recorded (an account's failed logins).
func (db *DB) ThrottlePeek(ctx context.Context, key string, now time.Time, window time.Duration, limit int) (blocked bool, retryAfter time.Duration, err error) {
	const op = "throttle peek"
	if limit < 1 || window <= 0 {
		return false, 0, fmt.Errorf("store: %s: limit %d and window %s must be positive", op, limit, window)
	}
	windowS := int64((window + time.Second - 1) / time.Second)
	tx, err := db.read(ctx)
	if err != nil {
		return false, 0, fail(op, err, "")
	}
	defer tx.Rollback()
	hits, err := throttleHits(ctx, tx, key, unix(now)-windowS)
	if err != nil {
		return false, 0, fail(op, err, "")
	}
	if len(hits) < limit {
		return false, 0, nil
	}
	return true, fromUnix(hits[len(hits)-limit] + windowS).Sub(now), nil
}

// throttleHits returns the times of key's attempts after since, oldest first.
func throttleHits(ctx context.Context, q querier, key string, since int64) ([]int64, error) {
	rows, err := q.QueryContext(ctx, `SELECT at FROM throttle_hits WHERE throttle_key = ? AND at > ? ORDER BY at, id`, key, since)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var at int64
		if err := rows.Scan(&at); err != nil {
			return nil, err
		}
		out = append(out, at)
	}
	return out, rows.Err()
}

// ThrottleReset forgets the attempts recorded for key, e.g. the account's
// after a successful login.
func (db *DB) ThrottleReset(ctx context.Context, key string) error {
	const op = "throttle reset"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()

	if _, err := tx.ExecContext(ctx, `DELETE FROM throttle_hits WHERE throttle_key = ?`, key); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// DeleteThrottleHitsBefore removes every recorded attempt older than before,
// of any key (keys that are never hit again are otherwise not pruned), and
// returns how many it removed. Pass a time further back than the longest
// window in use.
func (db *DB) DeleteThrottleHitsBefore(ctx context.Context, before time.Time) (int64, error) {
	const op = "delete throttle hits"
	tx, err := db.begin(ctx)
	if err != nil {
		return 0, fail(op, err, "")
	}
	defer tx.Rollback()

	res, err := tx.ExecContext(ctx, `DELETE FROM throttle_hits WHERE at < ?`, unix(before))
	if err != nil {
		return 0, fail(op, err, "")
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fail(op, err, "")
	}
	return n, fail(op, tx.Commit(), "")
}

package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// Lease is a named lease as TakeLease left it.
type Lease struct {
	Name   string
	Holder string
	// Generation counts the lease's acquisitions: it goes up each time the
	// lease is taken while free, expired or another's, and stays the same
	// when its holder renews it in time. It is the fencing token of the
	// work done under the lease (WithFence).
	Generation int64
	// Expires is when the lease ends unless renewed.
	Expires time.Time
}

// TakeLease gives the named lease to holder until now+ttl when it is free,
// expired or already holder's, and reports whether holder has it, with its
// generation. The holder renews it by taking it again before it expires;
// taking it after it expired — even by the same holder — is a new
// acquisition with a new generation, so work begun under the old one is
// refused (WithFence). Times are each replica's clock: replicas whose
// clocks differ by more than ttl could both believe they hold it, so ttl
// should be well above the clock skew (the fence still refuses the older
// generation's writes once the newer has been taken).
func (db *DB) TakeLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (Lease, bool, error) {
	const op = "take lease"
	tx, err := db.begin(withoutFence(ctx))
	if err != nil {
		return Lease{}, false, fail(op, err, "")
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `INSERT INTO leases (name, holder, expires_at, generation) VALUES (?, ?, ?, 1)
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at,
			generation = CASE WHEN leases.holder = excluded.holder AND leases.expires_at > ? THEN leases.generation ELSE leases.generation + 1 END
		WHERE leases.holder = excluded.holder OR leases.expires_at <= ?`,
		name, holder, unix(now.Add(ttl)), unix(now), unix(now))
	if err != nil {
		return Lease{}, false, fail(op, err, "")
	}
	n, err := res.RowsAffected()
	if err != nil {
		return Lease{}, false, fail(op, err, "")
	}
	l := Lease{Name: name}
	var expires int64
	if err := tx.QueryRowContext(ctx, `SELECT holder, generation, expires_at FROM leases WHERE name = ?`, name).Scan(&l.Holder, &l.Generation, &expires); err != nil {
		return Lease{}, false, fail(op, err, "")
	}
	l.Expires = fromUnix(expires)
	return l, n == 1, fail(op, tx.Commit(), "")
}

// ReleaseLease gives the lease up if holder has it, so another replica
// takes it at its next tick instead of waiting for it to expire.
func (db *DB) ReleaseLease(ctx context.Context, name, holder string) error {
	const op = "release lease"
	tx, err := db.begin(withoutFence(ctx))
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

// ErrLeaseLost refuses a write made under a fence (WithFence) whose lease
// has since expired or been taken again: the work it belongs to may be
// running on another replica now.
var ErrLeaseLost = errors.New("store: the lease this work runs under was lost (expired or taken over): write refused")

// fence is what WithFence puts in a context.
type fence struct {
	name       string
	generation int64
	now        func() time.Time
}

type fenceKey struct{}

// WithFence returns a context whose write transactions (every exported
// write method given it) are refused with ErrLeaseLost unless, inside the
// transaction, the lease l still has l's generation and has not expired
// at now(). The check and the write are one transaction under the write
// lock, and taking a lease is a write, so no takeover can come between
// them: background work done under a lease writes nothing once another
// replica may have taken the work over.
func WithFence(ctx context.Context, l Lease, now func() time.Time) context.Context {
	return context.WithValue(ctx, fenceKey{}, &fence{name: l.Name, generation: l.Generation, now: now})
}

// withoutFence returns ctx with no fence: for transactions that serve
// others than the fenced caller (a batch of bookings checks each booking's
// own fence) or that manage the lease itself.
func withoutFence(ctx context.Context) context.Context {
	if ctx.Value(fenceKey{}) == nil {
		return ctx
	}
	return context.WithValue(ctx, fenceKey{}, (*fence)(nil))
}

// checkFence refuses the write transaction tx with ErrLeaseLost when ctx
// carries a fence whose lease has moved on; with no fence it does nothing.
// On PostgreSQL the row is read FOR SHARE, so a takeover waits for this
// transaction to end even if writes stop sharing one lock.
func (db *DB) checkFence(ctx context.Context, tx querier) error {
	f, _ := ctx.Value(fenceKey{}).(*fence)
	if f == nil {
		return nil
	}
	q := `SELECT generation, expires_at FROM leases WHERE name = ?`
	if db.postgres {
		q += ` FOR SHARE`
	}
	var gen, expires int64
	err := tx.QueryRowContext(ctx, q, f.name).Scan(&gen, &expires)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && (gen != f.generation || expires <= unix(f.now()))) {
		return ErrLeaseLost
	}
	return err
}

// ConfirmLease returns ErrLeaseLost when ctx's fence (WithFence) no longer
// holds, else nil: for work outside the database that must not be done
// twice (sending mail), checked right before it.
func (db *DB) ConfirmLease(ctx context.Context) error {
	if f, _ := ctx.Value(fenceKey{}).(*fence); f == nil {
		return nil
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return fail("confirm lease", err, "")
	}
	return fail("confirm lease", tx.Rollback(), "")
}

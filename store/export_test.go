package store

// Store methods only this package's tests use: kept out of the product.

import (
	"context"
	"strings"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// RecordAudit appends one entry to the audit trail in its own transaction,
// for actions whose store method does not record it itself (money movements
// made through billing). Prefer recording inside the action's transaction.
func (db *DB) RecordAudit(ctx context.Context, e AuditEntry) error {
	const op = "record audit"
	if e.Action == "" || e.SubjectKind == "" {
		return invalid("An audit entry needs an action and a subject.")
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	if err := insertAudit(ctx, tx, e); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// ListHeartbeatRuns returns the heartbeat history of a node that overlaps
// [from, to), oldest first.
func (db *DB) ListHeartbeatRuns(ctx context.Context, offerID int64, node int, from, to time.Time) ([]HeartbeatRun, error) {
	const op = "list heartbeat runs"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	runs, err := queryRuns(ctx, tx, offerID, node, from, to)
	return runs, fail(op, err, "")
}

// VerifyOfferFigure marks the offer's figure of the given kind as verified
// by the platform, with the admin's evidence note. The offer must state a
// figure of that kind (else not found).
func (db *DB) VerifyOfferFigure(ctx context.Context, offerID int64, kind market.FigureKind, note string, now time.Time) error {
	const op = "verify offer figure"
	if strings.TrimSpace(note) == "" {
		return &market.Error{Code: market.CodeInvalid, Message: "Please correct the highlighted fields.",
			Fields: map[string]string{"verified_note": "Say what evidence the verification rests on."}}
	}
	if err := badText("verified_note", note, true); err != nil {
		return err
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()

	res, err := tx.ExecContext(ctx, `UPDATE offer_figures SET basis = ?, verified_note = ? WHERE offer_id = ? AND kind = ?`,
		string(market.FigureVerified), note, offerID, string(kind))
	if err != nil {
		return fail(op, err, "")
	}
	if n, err := res.RowsAffected(); err != nil {
		return fail(op, err, "")
	} else if n == 0 {
		return notFound("That offer states no such figure.")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE offers SET updated_at = ? WHERE id = ?`, unix(now), offerID); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// CountHeld returns how many of the buyer's reservations are held with a
// hold that has not expired at now.
func (db *DB) CountHeld(ctx context.Context, buyerID int64, now time.Time) (int, error) {
	const op = "count held reservations"
	tx, err := db.read(ctx)
	if err != nil {
		return 0, fail(op, err, "")
	}
	defer tx.Rollback()

	n, err := countHeld(ctx, tx, buyerID, now)
	if err != nil {
		return 0, fail(op, err, "")
	}
	return n, nil
}

// SetUserRoles sets whether the account may rent (buyer) and list
// (provider) compute.
func (db *DB) SetUserRoles(ctx context.Context, userID int64, buyer, provider bool) error {
	const op = "set user roles"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()

	if err := updateUser(ctx, tx, `UPDATE users SET is_buyer = ?, is_provider = ? WHERE id = ?`,
		boolInt(buyer), boolInt(provider), userID); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

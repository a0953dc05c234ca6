package store

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// rejectionState is what an audit row of a rejection records.
type rejectionState struct {
	State       market.ReservationState `json:"state"`
	Rejected    bool                    `json:"rejected,omitempty"`
	Founded     bool                    `json:"founded,omitempty"`
	RefundCents int64                   `json:"refund_cents,omitempty"`
}

// rejectionGrounds finds, in the caller's transaction, the evidence a
// rejection of r at now stands on (market.RejectionGrounds): an agent's
// acceptance result on one of its pieces short of the guarantee or that
// could not run; an outage an agent measured on one of its pieces (of an
// outage kind, market.OutageKinds); and the buyer's unfounded rejections in
// the trailing market.RejectLimitWindow.
func rejectionGrounds(ctx context.Context, tx *sql.Tx, r market.Reservation, now time.Time) (market.RejectionGrounds, error) {
	var g market.RejectionGrounds
	for _, p := range r.Pieces {
		var failed int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM acceptance_results WHERE piece_id = ? AND (devices_below > 0 OR error <> '')`,
			p.ID).Scan(&failed); err != nil {
			return g, err
		}
		g.FailedAcceptance = g.FailedAcceptance || failed > 0
		kinds, err := collect(ctx, tx, func(s scanner) (string, error) { var k string; return k, s.Scan(&k) },
			`SELECT kind FROM measured_outages WHERE piece_id = ? AND start_at < ?`, p.ID, unix(now))
		if err != nil {
			return g, err
		}
		for _, k := range kinds {
			g.MeasuredOutage = g.MeasuredOutage || slices.Contains(market.OutageKinds(), market.IncidentKind(k))
		}
	}
	err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM reservations WHERE buyer_id = ? AND rejected_at > ? AND reject_founded = 0`,
		r.BuyerID, unix(now.Add(-market.RejectLimitWindow))).Scan(&g.RecentUnfounded)
	return g, err
}

// RejectReservation records that the buyer rejected a rental of theirs at
// now within its acceptance period, in one transaction: the rule is
// market.CheckRejection (through market.RejectionStatement, with the
// platform fee feeBP, on the grounds rejectionGrounds finds); the reservation becomes cancelled with rejected_at
// and the reason (checked by market.ValidateRejectReason); its devices are
// free again; a settlement that refunds everything and pays no provider is
// stored for the workflow to carry out (the refund through the processor,
// its ledger entry when made); the providers are told; and the audit trail
// records it. Another buyer's reservation is not found; one that cannot be
// rejected (not started, past its acceptance period, no period on its
// contract, not paid) is a conflict.
func (db *DB) RejectReservation(ctx context.Context, buyerID, id int64, reason string, feeBP int, now time.Time) (market.Reservation, error) {
	const op = "reject reservation"
	reason, err := market.ValidateRejectReason(reason)
	if err != nil {
		return market.Reservation{}, err
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	defer tx.Rollback()

	r, err := getBuyerReservation(ctx, tx, buyerID, id)
	if err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	if err := market.ResaleLocked(r); err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	before := r.State
	g, err := rejectionGrounds(ctx, tx, r, now)
	if err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	st, err := market.RejectionStatement(r, now, feeBP, g)
	if err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	pay, err := getPayment(ctx, tx, r.ID)
	if err != nil && market.ErrorCode(err) != market.CodeNotFound {
		return market.Reservation{}, fail(op, err, "")
	}
	if err != nil || pay.Status != PaymentPaid || pay.PaymentIntentID == "" {
		return market.Reservation{}, conflict("This reservation has no completed payment to refund, so it cannot be rejected.")
	}
	r.CancelFeeCents = 0
	if err := setState(ctx, tx, &r, market.ReservationCancelled, now); err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE reservations SET rejected_at = ?, reject_reason = ?, reject_founded = ? WHERE id = ?`,
		unix(now), reason, boolInt(g.Founded()), r.ID); err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	r.RejectedAt, r.RejectReason = truncate(now), reason
	// The settlement's steps: the full refund, and zero payouts (done at once).
	if err := insertSettlement(ctx, tx, st, now); err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	for _, pp := range st.Payouts() {
		msg := market.Notice{Kind: market.NoticeRejectedFounded, Params: market.NoticeParams{Reservation: r.ID}}
		if !g.Founded() {
			msg = market.Notice{Kind: market.NoticeRejectedUnfounded, Params: market.NoticeParams{Reservation: r.ID, Kept: pp.Kept}}
		}
		if err := insertNotification(ctx, tx, Notification{UserID: pp.ProviderID, Kind: NotifyBookingCancelled, CreatedAt: now,
			URL: fmt.Sprintf("/provider/bookings/%d", r.ID), Notice: msg}); err != nil {
			return market.Reservation{}, fail(op, err, "")
		}
	}
	if err := insertAudit(ctx, tx, AuditEntry{At: now, ActorID: buyerID, Action: AuditReservationReject,
		SubjectKind: AuditSubjectReservation, SubjectID: r.ID,
		Before: AuditJSON(rejectionState{State: before}),
		After:  AuditJSON(rejectionState{State: r.State, Rejected: true, Founded: g.Founded(), RefundCents: int64(st.Refund)}), Note: reason}); err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	return r, fail(op, tx.Commit(), "")
}

// FindRejectionGrounds returns what a rejection of r at now would stand on
// (rejectionGrounds), for the pages that say what a rejection would do.
func (db *DB) FindRejectionGrounds(ctx context.Context, r market.Reservation, now time.Time) (market.RejectionGrounds, error) {
	const op = "find rejection grounds"
	tx, err := db.read(ctx)
	if err != nil {
		return market.RejectionGrounds{}, fail(op, err, "")
	}
	defer tx.Rollback()
	g, err := rejectionGrounds(ctx, tx, r, now)
	return g, fail(op, err, "")
}

// RejectionCount is how many rejections one party made or had, and how
// many of them were unfounded (no failed acceptance test, no measured
// outage), since a time.
type RejectionCount struct {
	Total, Unfounded int
}

// CountProviderRejections returns, per provider, the rejections of
// reservations with a piece of theirs since since, for the admins' page.
func (db *DB) CountProviderRejections(ctx context.Context, since time.Time) (map[int64]RejectionCount, error) {
	return db.countRejections(ctx, `SELECT p.provider_id, COUNT(DISTINCT r.id), COUNT(DISTINCT CASE WHEN r.reject_founded = 0 THEN r.id END)
		FROM reservations r JOIN reservation_pieces p ON p.reservation_id = r.id
		WHERE r.rejected_at > ? GROUP BY p.provider_id`, since)
}

// CountBuyerRejections returns, per buyer, the rejections they made since
// since, for the admins' page.
func (db *DB) CountBuyerRejections(ctx context.Context, since time.Time) (map[int64]RejectionCount, error) {
	return db.countRejections(ctx, `SELECT buyer_id, COUNT(*), COUNT(CASE WHEN reject_founded = 0 THEN 1 END)
		FROM reservations WHERE rejected_at > ? GROUP BY buyer_id`, since)
}

func (db *DB) countRejections(ctx context.Context, query string, since time.Time) (map[int64]RejectionCount, error) {
	const op = "count rejections"
	rows, err := db.reader.QueryContext(ctx, query, unix(since))
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer rows.Close()
	out := map[int64]RejectionCount{}
	for rows.Next() {
		var id int64
		var c RejectionCount
		if err := rows.Scan(&id, &c.Total, &c.Unfounded); err != nil {
			return nil, fail(op, err, "")
		}
		out[id] = c
	}
	return out, fail(op, rows.Err(), "")
}

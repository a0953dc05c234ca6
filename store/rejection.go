package store

import (
	"context"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// rejectionState is what an audit row of a rejection records.
type rejectionState struct {
	State       market.ReservationState `json:"state"`
	Rejected    bool                    `json:"rejected,omitempty"`
	RefundCents int64                   `json:"refund_cents,omitempty"`
}

// RejectReservation records that the buyer rejected a rental of theirs at
// now within its acceptance period, in one transaction: the rule is
// market.CheckRejection (through market.RejectionStatement, with the
// platform fee feeBP); the reservation becomes cancelled with rejected_at
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
	st, err := market.RejectionStatement(r, now, feeBP)
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
	if _, err := tx.ExecContext(ctx, `UPDATE reservations SET rejected_at = ?, reject_reason = ? WHERE id = ?`, unix(now), reason, r.ID); err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	r.RejectedAt, r.RejectReason = truncate(now), reason
	// The settlement's steps: the full refund, and zero payouts (done at once).
	if err := insertSettlement(ctx, tx, st, now); err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	for _, pp := range st.Payouts() {
		msg := fmt.Sprintf("The buyer rejected booking #%d within its acceptance period and is refunded in full; nothing of it is paid out. Its devices are free again.", r.ID)
		if err := insertNotification(ctx, tx, Notification{UserID: pp.ProviderID, Kind: NotifyBookingCancelled, CreatedAt: now,
			URL: fmt.Sprintf("/provider/bookings/%d", r.ID), Message: msg}); err != nil {
			return market.Reservation{}, fail(op, err, "")
		}
	}
	if err := insertAudit(ctx, tx, AuditEntry{At: now, ActorID: buyerID, Action: AuditReservationReject,
		SubjectKind: AuditSubjectReservation, SubjectID: r.ID,
		Before: AuditJSON(rejectionState{State: before}),
		After:  AuditJSON(rejectionState{State: r.State, Rejected: true, RefundCents: int64(st.Refund)}), Note: reason}); err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	return r, fail(op, tx.Commit(), "")
}

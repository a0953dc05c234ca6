package workflow

import (
	"context"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// DecideDispute records an admin's decision (store.DecideDispute: the
// credit applied to the statement under market.ApplyDisputeCredit's rule)
// and, for a granted credit, refunds it through the processor at once and
// runs the payouts the decision released. When the processor fails the
// decision stands and refunded reports false; the background loop (or the
// admin's Retry) finishes the refund.
func (s *Service) DecideDispute(ctx context.Context, adminID, disputeID int64, credit market.Cents, reason string) (d store.DisputeCase, refunded bool, err error) {
	dec, err := s.db.DecideDispute(ctx, adminID, disputeID, credit, reason, s.now())
	if err != nil {
		return store.DisputeCase{}, false, err
	}
	refunded = true
	if dec.PaymentIntentID != "" {
		if err := s.RefundDispute(ctx, dec.Case.ID); err != nil {
			s.log.Error("dispute refund failed; will retry", "dispute_id", dec.Case.ID, "err", err)
			refunded = false
		}
	}
	s.runDueSettlements(ctx, s.now())
	if dec.Case, err = s.db.FindDispute(ctx, dec.Case.ID); err != nil {
		return store.DisputeCase{}, refunded, err
	}
	return dec.Case, refunded, nil
}

// RefundDispute refunds a granted credit not yet refunded through the
// processor, with the dispute's idempotency key so a retry never refunds
// twice, and records it. A dispute with nothing to refund is a conflict.
func (s *Service) RefundDispute(ctx context.Context, disputeID int64) error {
	d, err := s.db.FindDispute(ctx, disputeID)
	if err != nil {
		return err
	}
	if d.RefundState != store.DisputeRefundPending {
		return market.Errorf(market.CodeConflict, "There is no refund waiting on this dispute.")
	}
	// Time bought on resale is refunded on the holder's own payment.
	p, err := s.db.FindPaymentOf(ctx, d.ReservationID)
	if err != nil {
		return err
	}
	ref, err := s.pay.Refund(ctx, p.PaymentIntentID, d.CreditCents, market.DisputeKey(d.ID, market.EntryRefund, 0))
	if err != nil {
		return err
	}
	if _, err := s.db.RecordDisputeRefund(ctx, d.ID, ref.ID, s.now()); err != nil {
		s.log.Error("dispute refund made but not recorded; the retry records it", "dispute_id", d.ID, "refund_id", ref.ID, "err", err)
		return err
	}
	s.log.Info("dispute credit refunded", "dispute_id", d.ID, "refund_id", ref.ID, "amount_cents", int64(d.CreditCents))
	return nil
}

// OpenDispute opens a dispute over one of the buyer's reservations with
// their first statement; the provider is told and may answer.
func (s *Service) OpenDispute(ctx context.Context, buyerID, reservationID int64, reason market.DisputeReason, statement string) (store.DisputeCase, error) {
	d, err := s.db.OpenDispute(ctx, buyerID, reservationID, reason, statement, s.now())
	if err != nil {
		return store.DisputeCase{}, err
	}
	s.log.Info("dispute opened", "dispute_id", d.ID, "reservation_id", reservationID)
	return d, nil
}

// AddDisputeStatement adds a party's statement to an open dispute.
func (s *Service) AddDisputeStatement(ctx context.Context, userID, disputeID int64, body string) error {
	return s.db.AddDisputeStatement(ctx, userID, disputeID, body, s.now())
}

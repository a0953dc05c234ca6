package workflow

import (
	"context"

	"github.com/gpumarket/gpumarket/market"
)

// Reject records that the buyer rejected a running rental within its
// acceptance period (store.RejectReservation: market.CheckRejection decides),
// releases its devices in the index and refunds it in full at once through
// the processor, with the settlement's idempotency key, so a retry never
// refunds twice; when the processor fails the rejection stands and the
// retrier finishes the refund. No provider is paid for it.
func (s *Service) Reject(ctx context.Context, buyerID, reservationID int64, reason string) (market.Reservation, error) {
	now := s.now()
	if err := s.refuseMetered(ctx, reservationID); err != nil {
		return market.Reservation{}, err
	}
	r, err := s.db.RejectReservation(ctx, buyerID, reservationID, reason, s.feeBP, now)
	if err != nil {
		return market.Reservation{}, err
	}
	s.log.Info("reservation rejected in its acceptance period", "reservation_id", r.ID, "amount_cents", int64(r.AmountCents))
	if st, err := s.db.FindSettlement(ctx, r.ID); err == nil {
		s.runSettlement(ctx, st, now)
	} else {
		s.log.Error("rejected reservation's settlement not loaded; the retrier will run it", "reservation_id", r.ID, "err", err)
	}
	return r, nil
}

package workflow

import (
	"context"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// Book reserves pieces for a buyer in one database transaction that
// re-checks capacity, held for hold, and adds them to the matcher index.
func (s *Service) Book(ctx context.Context, buyerID int64, pieces []market.ReservationPiece, requestJSON string, hold time.Duration) (market.Reservation, error) {
	r, err := s.db.CreateReservation(ctx, buyerID, pieces, requestJSON, s.now(), hold)
	if err != nil {
		return market.Reservation{}, err
	}
	s.log.Info("reservation held", "reservation_id", r.ID, "buyer_id", buyerID, "amount_cents", int64(r.AmountCents))
	return r, nil
}

// Cancel cancels a buyer's reservation under its policy: capacity is
// released in the index, and a paid reservation is settled at once (the
// refund less the cancellation fee and the providers' payouts of the fee
// are made now, and by the retrier if the processor fails).
func (s *Service) Cancel(ctx context.Context, buyerID, reservationID int64) (market.Reservation, error) {
	r, err := s.db.CancelReservation(ctx, buyerID, reservationID, s.feeBP, s.now())
	if err != nil {
		return market.Reservation{}, err
	}
	s.wakeAgentsOf(r) // keys to remove at once
	s.expireCheckout(ctx, r.ID)
	s.log.Info("reservation cancelled", "reservation_id", r.ID, "fee_cents", int64(r.CancelFeeCents))
	if st, err := s.db.FindSettlement(ctx, r.ID); err == nil {
		s.runSettlement(ctx, st, s.now())
	} else if market.ErrorCode(err) != market.CodeNotFound {
		s.log.Error("cancelled reservation's settlement not loaded; the retrier will run it", "reservation_id", r.ID, "err", err)
	}
	return r, nil
}

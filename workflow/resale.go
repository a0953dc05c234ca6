package workflow

import (
	"context"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// Resale of reserved time (market/resale.go): listing, buying, and the
// money steps that follow a sale.

// ListRemainingTime lists the remaining time of the seller's reservation
// from `from` at price (store.CreateResaleListing).
func (s *Service) ListRemainingTime(ctx context.Context, sellerID, reservationID int64, from time.Time, price market.Cents) (market.ResaleListing, error) {
	if err := s.refuseMetered(ctx, reservationID); err != nil {
		return market.ResaleListing{}, err
	}
	return s.db.CreateResaleListing(ctx, sellerID, reservationID, from, price, s.now())
}

// WithdrawResale withdraws the seller's open listing.
func (s *Service) WithdrawResale(ctx context.Context, sellerID, listingID int64) (market.ResaleListing, error) {
	return s.db.WithdrawResaleListing(ctx, sellerID, listingID, s.now())
}

// BuyResale buys a listing for buyerID with the buyer's default saved
// card. The charge is first recorded (store.CreateResaleCharge, which
// re-checks that the listing is for sale and not the buyer's own: one
// pending charge per listing and buyer, so a repeated click charges once),
// then made under that intent's key and the listing sold in the
// transaction that finishes it (makeCharge → sellResale). If the sale
// fails after the charge (sold to someone else meanwhile), the payment is
// recorded and refunded in full at once, or by the retrier; a crash in
// between leaves the intent to the retrier (chargeTick), which does the
// same. A declined card ends that attempt; the next try (another card, or
// the same one later) is a new charge with a new key. A sale already made
// to the buyer returns its reservation. After a sale the seller's credit
// is refunded at once, or by the retrier.
func (s *Service) BuyResale(ctx context.Context, buyerID, listingID int64) (market.Reservation, error) {
	ro, err := s.db.FindResaleOffer(ctx, listingID)
	if err != nil {
		return market.Reservation{}, err
	}
	l := ro.Listing
	if l.State == market.ListingSold && l.BuyerID == buyerID {
		return s.db.FindReservation(ctx, l.SoldReservationID)
	}
	if _, err := s.defaultMethod(ctx, buyerID); err != nil {
		return market.Reservation{}, err
	}
	ci, err := s.db.CreateResaleCharge(ctx, buyerID, l.ID, s.now())
	if err != nil {
		return market.Reservation{}, err
	}
	res, err := s.makeCharge(ctx, ci)
	if err != nil {
		return market.Reservation{}, err
	}
	return res.Sold, nil
}

// refundResalePayment refunds an unsold resale payment in full now; a
// failure is recorded for the retrier.
func (s *Service) refundResalePayment(ctx context.Context, f store.ResaleRefund, now time.Time) {
	ref, err := s.pay.Refund(ctx, f.PaymentIntentID, f.Amount, market.ResaleChargeKey(f.ListingID, f.BuyerID)+"_refund")
	if err == nil {
		err = s.db.RecordResaleRefund(ctx, f.ID, ref.ID, now)
	}
	if err != nil {
		s.log.Error("resale: unsold payment refund failed; will retry", "listing_id", f.ListingID, "buyer_id", f.BuyerID, "attempt", f.Attempts+1, "err", err)
		if rerr := s.db.RecordResaleRefundFailure(ctx, f.ID, err.Error(), now.Add(backoff(f.Attempts+1)), now); rerr != nil {
			s.log.Error("resale: record refund failure", "listing_id", f.ListingID, "err", rerr)
		}
	}
}

// resaleMoneyTick carries out the money steps of resales that are due:
// each seller's credit, refunded on the payment they booked with (with the
// listing's idempotency key), each SLA credit of resold hours refunded on
// their holder's payment, each unsold payment refunded in full, and
// reservations bought on resale marked settled once their original is.
func (s *Service) resaleMoneyTick(ctx context.Context, now time.Time) {
	credits, err := s.db.ListDueResaleCredits(ctx, now)
	if err != nil {
		s.log.Error("background: list resale credits", "err", err)
	}
	for _, c := range credits {
		l := c.Listing
		s.resaleRefundStep(ctx, l, "seller credit", c.PaymentIntentID, l.Credit, "credit",
			func(refundID string) error { return s.db.RecordResaleCredit(ctx, l.ID, refundID, now) }, now)
	}
	sla, err := s.db.ListDueResaleSLACredits(ctx, now)
	if err != nil {
		s.log.Error("background: list resale sla credits", "err", err)
	}
	for _, c := range sla {
		l := c.Listing
		s.resaleRefundStep(ctx, l, "sla credit to the holder", l.ChargeRef, c.Amount, "sla_refund",
			func(refundID string) error { return s.db.RecordResaleSLARefund(ctx, l.ID, refundID, now) }, now)
	}
	refunds, err := s.db.ListDueResaleRefunds(ctx, now)
	if err != nil {
		s.log.Error("background: list resale refunds", "err", err)
	}
	for _, f := range refunds {
		s.refundResalePayment(ctx, f, now)
	}
	if _, err := s.db.SettleResoldReservations(ctx, now); err != nil {
		s.log.Error("background: settle resold reservations", "err", err)
	}
}

// ResaleSources returns the open listings that answer req at now
// (market.ResaleMatches, with each provider's reliability as the index
// scores it): the "resale" source beside the matcher's quotes.
func (s *Service) ResaleSources(ctx context.Context, req market.Request) ([]store.ResaleOffer, error) {
	now := s.now()
	open, err := s.db.ListOpenResaleOffers(ctx, now)
	if err != nil {
		return nil, err
	}
	var out []store.ResaleOffer
	for _, ro := range open {
		rel := map[int64]int{}
		for _, o := range ro.Offers {
			rel[o.ProviderID] = s.Reliability(o.ProviderID).BP
		}
		if market.ResaleMatches(ro.Listing, ro.Reservation, ro.Offers, rel, req, now) {
			out = append(out, ro)
		}
	}
	return out, nil
}

// resaleRefundStep makes one of a listing's refund steps (what: the
// seller's credit, or the SLA credit of resold hours to their holder) on
// paymentIntentID under the listing's idempotency key for step, and
// records it; a failure is recorded for a retry with backoff.
func (s *Service) resaleRefundStep(ctx context.Context, l market.ResaleListing, what, paymentIntentID string, amount market.Cents,
	step string, record func(refundID string) error, now time.Time) {
	ref, err := s.pay.Refund(ctx, paymentIntentID, amount, market.ResaleKey(l.ID, step))
	if err == nil {
		err = record(ref.ID)
	}
	if err != nil {
		s.log.Error("resale: refund step failed; will retry", "step", what, "listing_id", l.ID, "attempt", l.Attempts+1, "err", err)
		if rerr := s.db.RecordResaleStepFailure(ctx, l.ID, err.Error(), now.Add(backoff(l.Attempts+1)), now); rerr != nil {
			s.log.Error("resale: record refund step failure", "step", what, "listing_id", l.ID, "err", rerr)
		}
		return
	}
	s.log.Info("resale: refunded", "step", what, "listing_id", l.ID, "refund_id", ref.ID, "amount_cents", int64(amount))
}

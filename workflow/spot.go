package workflow

import (
	"context"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// spotHold is how long a won spot hour is held for its payment, which is
// made at once with the buyer's saved card: a declined hour stays held this
// long for the buyer to pay it another way (the payment page), as the
// decline's notification says, then lapses like any unpaid hold.
const spotHold = 10 * time.Minute

// PlaceSpotBid places a buyer's bid for interruptible capacity. It needs a
// saved payment method (each won hour is charged to it at once): without
// one it is a market CodeInvalid error asking for one, and so is a default
// card that has neither been saved nor charged successfully within
// market.SpotCardRecency (market.SpotCardProblem). The rest is
// store.PlaceSpotBid's (market.ValidateSpotBid, the bidder limits).
func (s *Service) PlaceSpotBid(ctx context.Context, b market.SpotBid) (market.SpotBid, error) {
	now := s.now()
	m, err := s.defaultMethod(ctx, b.BuyerID)
	if err != nil {
		return market.SpotBid{}, err
	}
	if msg := market.SpotCardProblem(m, now); msg != "" {
		return market.SpotBid{}, market.Errorf(market.CodeInvalid, "%s", msg)
	}
	b, err = s.db.PlaceSpotBid(ctx, b, now)
	if err != nil {
		return market.SpotBid{}, err
	}
	s.log.Info("spot bid placed", "bid_id", b.ID, "offer_id", b.OfferID, "buyer_id", b.BuyerID, "devices", b.Devices, "max_cents", int64(b.MaxCents))
	return b, nil
}

// CancelSpotBid stops a buyer's live bid; hours it already won stay booked.
func (s *Service) CancelSpotBid(ctx context.Context, buyerID, bidID int64) (market.SpotBid, error) {
	return s.db.CancelSpotBid(ctx, buyerID, bidID, s.now())
}

// spotTick clears every offer-hour whose clearing time has passed
// (ClearSpot) and finishes the bids whose window has ended.
func (s *Service) spotTick(ctx context.Context, now time.Time) {
	due, err := s.db.SpotHoursDue(ctx, now)
	if err != nil {
		s.log.Error("background: spot hours due", "err", err)
	}
	for _, d := range due {
		if _, err := s.ClearSpot(ctx, d.OfferID, d.Hour, now); err != nil {
			s.log.Error("background: clear spot hour", "offer_id", d.OfferID, "hour", d.Hour, "err", err)
		}
	}
	s.releaseSpotHolds(ctx)
	if _, err := s.db.FinishSpotBids(ctx, now); err != nil {
		s.log.Error("background: finish spot bids", "err", err)
	}
}

// ClearSpot clears one offer-hour at now. First every competing bid's
// maximum for the hour is held on its buyer's saved card
// (authorizeSpotHour); only bids whose hold succeeded take part, so a
// card that declines cannot win or set the price. Then the hour is cleared
// (store.ClearSpotHour: at most once, whoever calls it, with each won
// hour's charge, a capture of its hold, recorded in the same transaction),
// the losers' holds are released, and each charge is made at once (at the
// clearing price, never above the bid's maximum). A crash after the
// clearing leaves the charges pending for the retrier (chargeTick), so the
// won hours are paid, not lost. A won hour that cannot be paid (declined,
// or no saved card any more) stops its bid, with a notification; the hour
// stays held for spotHold, payable on the payment page, then lapses and
// its devices go back on the market. The index follows through the store's
// change feed: the won hours' pieces as they are stored, and the clearing
// price for quotes once the last won hour's reservation turns paid
// (market.SpotQuotePrice, store.SpotQuotePrices).
func (s *Service) ClearSpot(ctx context.Context, offerID int64, hour, now time.Time) (store.SpotResult, error) {
	if err := s.authorizeSpotHour(ctx, offerID, hour); err != nil {
		return store.SpotResult{}, err
	}
	res, err := s.db.ClearSpotHour(ctx, offerID, hour, now, spotHold)
	if err != nil || !res.Cleared {
		return res, err
	}
	s.releaseSpotHolds(ctx)
	c := res.Clearing
	s.log.Info("spot hour cleared", "offer_id", offerID, "hour", c.Hour, "price_cents", int64(c.PriceCents),
		"capacity", c.Capacity, "devices_bid", c.DevicesBid, "devices_sold", c.DevicesSold, "preempted", len(res.Preempted))
	for _, a := range res.Awards {
		r := a.Reservation
		var err error
		if a.Charge.ID == 0 {
			err = market.Errorf(market.CodeInvalid, msgNoSavedMethod)
		} else {
			_, err = s.payReservationCharge(ctx, a.Charge, r)
		}
		if err != nil {
			code := market.ErrorCode(err)
			if code != market.CodeConflict && code != market.CodeInvalid || market.ErrorMessage(err) == msgChargePending {
				// Not the card's answer: the charge stays pending for the retrier.
				s.log.Error("spot hour not paid yet", "reservation_id", r.ID, "bid_id", a.BidID, "err", err)
				continue
			}
			reason := "your saved card was not charged"
			if code == market.CodeInvalid {
				reason = "you have no saved payment method"
			}
			s.log.Info("spot hour declined; bid stopped", "reservation_id", r.ID, "bid_id", a.BidID)
			if _, err := s.db.StopSpotBidDeclined(ctx, r.BuyerID, a.BidID, reason, s.now()); err != nil && market.ErrorCode(err) != market.CodeConflict {
				s.log.Error("spot bid not stopped", "bid_id", a.BidID, "err", err)
			}
		}
	}
	return res, nil
}

// spotPriced prices the offers' interruptible capacity as quotes do (the
// index's candidate): at each offer's latest spot clearing, between its
// floor and its on-demand price (market.SpotQuotePrice). Extensions use
// it, so extending an interruptible booking is no way around the auction
// either.
func (s *Service) spotPriced(ctx context.Context, offers map[int64]market.Offer, now time.Time) error {
	for id, o := range offers {
		if !o.Interruptible {
			continue
		}
		spot, err := s.db.SpotQuotePrices(ctx, now, id)
		if err != nil {
			return err
		}
		o.InterruptibleCentsPerDH = market.SpotQuotePrice(o.InterruptibleCentsPerDH, o.PriceCentsPerDeviceHour, spot[id])
		offers[id] = o
	}
	return nil
}

package workflow

import (
	"context"
	"time"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
)

// authorizeSpotHour places the holds of an offer-hour's competing bids
// before it is cleared (market.SpotAuthorization): each recorded first
// (store.PrepareSpotAuthorizations), then asked of the processor under its
// own key. A bid whose card declines sits the hour out and is stopped, as
// a declined won hour's bid is; one whose call fails otherwise sits this
// hour out too (its hold, if any, is released after the clearing).
func (s *Service) authorizeSpotHour(ctx context.Context, offerID int64, hour time.Time) error {
	pending, err := s.db.PrepareSpotAuthorizations(ctx, offerID, hour, s.now())
	if err != nil {
		return err
	}
	for _, a := range pending {
		log := s.log.With("spot_authorization_id", a.ID, "bid_id", a.BidID, "offer_id", offerID)
		pay, err := s.placeHold(ctx, a)
		now := s.now()
		if _, ok := billing.AsDecline(err); ok || refused(err) || (err == nil && pay.Status != "requires_capture") {
			log.Info("spot hold declined; bid sits the hour out and stops", "err", err, "status", pay.Status)
			if _, rerr := s.db.RecordSpotAuthorization(ctx, a.ID, market.SpotAuthPending, market.SpotAuthDeclined, pay.ID, now); rerr != nil {
				log.Error("record spot hold", "err", rerr)
			}
			s.stopDeclinedBid(ctx, a, now)
			continue
		}
		if err != nil {
			log.Warn("spot hold not answered; the bid sits the hour out", "err", err)
			continue
		}
		if _, err := s.db.RecordSpotAuthorization(ctx, a.ID, market.SpotAuthPending, market.SpotAuthAuthorized, pay.ID, now); err != nil {
			log.Error("record spot hold", "err", err)
		}
	}
	return nil
}

// releaseSpotHolds cancels the holds no clearing will capture: the bids
// that lost their hour, and holds whose call went unanswered before the
// hour was cleared (asked again under the same key to learn the payment,
// then released). A release that fails is tried again next tick.
func (s *Service) releaseSpotHolds(ctx context.Context) {
	holds, err := s.db.ListSpotAuthorizationsToRelease(ctx)
	if err != nil {
		s.log.Error("background: spot holds to release", "err", err)
		return
	}
	for _, a := range holds {
		log := s.log.With("spot_authorization_id", a.ID, "bid_id", a.BidID)
		pi := a.PaymentIntentID
		if a.State == market.SpotAuthPending {
			pay, err := s.placeHold(ctx, a)
			if _, ok := billing.AsDecline(err); ok || refused(err) {
				now := s.now()
				if _, err := s.db.RecordSpotAuthorization(ctx, a.ID, a.State, market.SpotAuthDeclined, pay.ID, now); err != nil {
					log.Error("record spot hold", "err", err)
				}
				s.stopDeclinedBid(ctx, a, now)
				continue
			}
			if err != nil {
				log.Warn("spot hold not answered; will try again", "err", err)
				continue
			}
			pi = pay.ID
		}
		if err := s.pay.ReleaseAuthorization(ctx, pi); err != nil {
			log.Warn("spot hold not released; will try again", "payment_intent_id", pi, "err", err)
			continue
		}
		if _, err := s.db.RecordSpotAuthorization(ctx, a.ID, a.State, market.SpotAuthReleased, pi, s.now()); err != nil {
			log.Error("record spot hold released", "err", err)
		}
	}
}

// stopDeclinedBid stops a bid whose card declined its hold, as a declined
// won hour's bid is stopped, with a notification.
func (s *Service) stopDeclinedBid(ctx context.Context, a market.SpotAuthorization, now time.Time) {
	if _, err := s.db.StopSpotBidDeclined(ctx, a.BuyerID, a.BidID, "your saved card declined the hold for the hour's maximum", now); err != nil &&
		market.ErrorCode(err) != market.CodeConflict {
		s.log.Error("spot bid not stopped", "bid_id", a.BidID, "err", err)
	}
}

// placeHold asks the processor for a spot hold (an authorisation of its
// amount on its card) under the hold's own key: asked again, the
// processor answers with the same authorisation.
func (s *Service) placeHold(ctx context.Context, a market.SpotAuthorization) (billing.Payment, error) {
	return s.pay.ChargeSaved(ctx, billing.ChargeInput{Customer: a.Customer, PaymentMethodID: a.ProcessorMethodID,
		Amount: a.Amount, Description: "Spot bid hold", IdempotencyKey: a.Key(), Metadata: a.Metadata(), Authorize: true})
}

package workflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// Charges of saved cards, recorded before they are made
// (market.ChargeIntent). The transaction that decides a charge — a spot
// clearing, a standing order's fill, a buyer's "pay with saved card", a
// resale purchase, a dearer replacement's buyer share — records it as a pending intent; makeCharge makes it
// after that commit, under the intent's own idempotency key and with
// metadata naming the intent, and records the outcome in one transaction
// that also finishes the intent. After a crash anywhere in between,
// chargeTick finds the intent pending and calls makeCharge again: the
// processor answers the repeated call with the first call's payment (or
// makes it now), and the outcome is recorded then — a payment that is no
// longer wanted (the hold ended, the listing was sold or withdrawn
// meanwhile) is recorded and refunded in full.

// chargeResult is what making a charge did.
type chargeResult struct {
	// Payment is the processor's payment, when it succeeded.
	Payment billing.Payment
	// Outcome is how a reservation's payment was recorded (PurposeReservation).
	Outcome store.PaymentOutcome
	// Sold is the buyer's new reservation (PurposeResale, sold).
	Sold market.Reservation
}

// makeCharge makes a pending charge and records its outcome. A decline is
// recorded (the intent declined; for a reservation, the failed payment and
// the buyer told) and returned as a market CodeConflict error with a
// message for the buyer; a processor failure or a payment still
// processing is recorded for a retry with backoff and returned. A resale
// purchase whose listing cannot be sold any more is recorded as unsold and
// refunded, and returned as the sale's error.
func (s *Service) makeCharge(ctx context.Context, ci market.ChargeIntent) (chargeResult, error) {
	log := s.log.With("charge_intent_id", ci.ID, "purpose", ci.Purpose, "reservation_id", ci.ReservationID, "buyer_id", ci.BuyerID)
	if ci.State != market.ChargePending {
		return chargeResult{}, market.Errorf(market.CodeConflict, "This payment has already been made or refused.")
	}
	var pay billing.Payment
	var err error
	switch {
	case ci.Authorized:
		// A hold placed before the charge was decided (a spot hour):
		// take the amount from it, once under the intent's key.
		in := billing.CaptureInput{PaymentIntentID: ci.PaymentIntentID, Amount: ci.Amount, IdempotencyKey: ci.Key(), Metadata: ci.Metadata()}
		if ci.Purpose == market.PurposeReservation {
			in.ReservationID = ci.ReservationID
		}
		pay, err = s.pay.Capture(ctx, in)
	case ci.PaymentIntentID != "":
		// Known from an earlier attempt (still processing then): read it.
		pay, err = s.pay.RetrievePayment(ctx, ci.PaymentIntentID)
	default:
		in := billing.ChargeInput{Customer: ci.Customer, PaymentMethodID: ci.ProcessorMethodID, Amount: ci.Amount,
			Description: chargeDescription(ci), IdempotencyKey: ci.Key(), Metadata: ci.Metadata()}
		if ci.Purpose == market.PurposeReservation {
			in.ReservationID = ci.ReservationID
		}
		pay, err = s.pay.ChargeSaved(ctx, in)
	}
	now := s.now()
	if d, ok := billing.AsDecline(err); ok {
		msg := declineMessage(d, ci.CardLabel)
		log.Info("saved card declined", "code", d.Code, "decline_code", d.DeclineCode, "payment_intent_id", d.PaymentIntentID)
		return chargeResult{}, s.declineCharge(ctx, ci, d.PaymentIntentID, msg, now)
	}
	if refused(err) {
		// The processor refused the call itself (not the bank, not a
		// failure worth retrying): nothing was charged, and repeating the
		// same call would be refused the same way.
		log.Error("charge refused by the processor", "err", err)
		msg := "The payment could not be made with your saved card. Nothing was charged."
		return chargeResult{}, s.declineCharge(ctx, ci, "", msg, now)
	}
	if err == nil && (pay.Status == "canceled" || pay.Status == "requires_payment_method") {
		// A payment that was processing and then failed: nothing charged.
		log.Info("saved card payment failed after processing", "payment_intent_id", pay.ID, "status", pay.Status)
		msg := declineMessage(&billing.Decline{PaymentIntentID: pay.ID, Code: "card_declined"}, ci.CardLabel)
		return chargeResult{}, s.declineCharge(ctx, ci, pay.ID, msg, now)
	}
	if err == nil && !pay.Succeeded {
		err = fmt.Errorf("workflow: payment %s is %s", pay.ID, pay.Status)
	}
	if err != nil {
		log.Warn("charge not finished; will retry", "attempt", ci.Attempts+1, "payment_intent_id", pay.ID, "err", err)
		if rerr := s.db.RecordChargeAttempt(ctx, ci.ID, pay.ID, err.Error(), now.Add(backoff(ci.Attempts+1)), now); rerr != nil {
			log.Error("record charge attempt", "err", rerr)
		}
		if pay.ID != "" {
			// Cards succeed or fail at once; anything else waits for the
			// retrier (or the processor's payment event).
			return chargeResult{}, market.Errorf(market.CodeConflict, msgChargePending)
		}
		return chargeResult{}, err
	}
	switch ci.Purpose {
	case market.PurposeReservation:
		outcome, err := s.recordPayment(ctx, log, store.PaymentEvent{
			EventType: savedEventType, ReservationID: ci.ReservationID, PaymentIntentID: pay.ID, ChargeID: pay.ChargeID,
			Amount: pay.AmountReceived, Currency: market.Currency, ChargeIntentID: ci.ID,
		}, now)
		return chargeResult{Payment: pay, Outcome: outcome}, err
	case market.PurposeResale:
		n, err := s.sellResale(ctx, log, ci, pay, now)
		return chargeResult{Payment: pay, Sold: n}, err
	case market.PurposeReplacement:
		return chargeResult{Payment: pay}, s.bookChargedReplacement(ctx, ci, pay.ID, now)
	}
	return chargeResult{}, fmt.Errorf("workflow: charge intent %d has unknown purpose %q", ci.ID, ci.Purpose)
}

// declineCharge records that a charge ended without money moving (the
// bank or the processor refused it) and returns the buyer's message as a
// market CodeConflict error.
func (s *Service) declineCharge(ctx context.Context, ci market.ChargeIntent, paymentIntentID, msg string, now time.Time) error {
	if _, err := s.db.RecordChargeDeclined(ctx, ci.ID, paymentIntentID, msg, now); err != nil {
		return err
	}
	return market.Errorf(market.CodeConflict, "%s", msg)
}

// sellResale sells the listing a resale charge paid for, finishing the
// charge in the sale's transaction. When the listing cannot be sold any
// more (sold to someone else, withdrawn, its start passed), the payment is
// recorded as unsold — finishing the charge — and refunded in full at
// once, or by the retrier; the sale's error is returned. A sale already
// made to the buyer with this very payment (a retry) returns its
// reservation.
func (s *Service) sellResale(ctx context.Context, log *slog.Logger, ci market.ChargeIntent, pay billing.Payment, now time.Time) (market.Reservation, error) {
	sold, n, err := s.db.SellResaleListing(ctx, ci.ListingID, ci.BuyerID, pay.ID, ci.ID, s.feeBP, now)
	if err == nil {
		log.Info("resale sold", "listing_id", sold.ID, "new_reservation_id", n.ID, "price_cents", int64(sold.Price), "fee_cents", int64(sold.Fee))
		s.resaleMoneyTick(ctx, now)
		return n, nil
	}
	if again, ferr := s.db.FindResaleOffer(ctx, ci.ListingID); ferr == nil && again.Listing.State == market.ListingSold &&
		again.Listing.BuyerID == ci.BuyerID && again.Listing.ChargeRef == pay.ID {
		return s.db.FindReservation(ctx, again.Listing.SoldReservationID)
	}
	f, rerr := s.db.RecordUnsoldPayment(ctx, ci.ListingID, ci.BuyerID, pay.ID, pay.AmountReceived, ci.ID, now)
	if rerr != nil {
		log.Error("resale: unsold payment not recorded; the charge stays pending for the retrier", "payment_intent_id", pay.ID, "err", rerr)
		return market.Reservation{}, err
	}
	s.refundResalePayment(ctx, f, now)
	return market.Reservation{}, err
}

// chargeTick takes up the charges left pending past their grace period (a
// crash between recording and making them, a processor failure, a payment
// still processing) and makes them again under the same key.
func (s *Service) chargeTick(ctx context.Context, now time.Time) {
	due, err := s.db.ListDueChargeIntents(ctx, now)
	if err != nil {
		s.log.Error("background: list due charges", "err", err)
		return
	}
	for _, ci := range due {
		_, err := s.makeCharge(ctx, ci)
		switch {
		case err == nil:
		case market.ErrorCode(err) == market.CodeInternal:
			s.log.Error("background: charge", "charge_intent_id", ci.ID, "err", err)
		case ci.Purpose == market.PurposeReservation:
			s.stopDeclinedSpotBid(ctx, ci)
		}
	}
}

// stopDeclinedSpotBid stops the spot bid of a won hour whose charge the
// retrier found declined, as ClearSpot does when the decline comes at
// once: a bid whose card is refused must not go on winning hours.
func (s *Service) stopDeclinedSpotBid(ctx context.Context, ci market.ChargeIntent) {
	if got, err := s.db.FindChargeIntent(ctx, ci.ID); err != nil || got.State != market.ChargeDeclined {
		return
	}
	bidID, err := s.db.FindSpotBidOfReservation(ctx, ci.ReservationID)
	if err != nil {
		return // not a spot hour (a standing order's fill stays held for the buyer)
	}
	if _, err := s.db.StopSpotBidDeclined(ctx, ci.BuyerID, bidID, "your saved card was not charged", s.now()); err != nil && market.ErrorCode(err) != market.CodeConflict {
		s.log.Error("spot bid not stopped", "bid_id", bidID, "err", err)
	}
}

// refused reports whether err is the processor refusing a charge outright:
// an invalid request it will never accept (a processor error that is not
// retryable, or the local processor's invalid or conflicting call). Bank
// declines are *billing.Decline and handled before; anything else may have
// gone through and is retried under the same key.
func refused(err error) bool {
	var be *billing.Error
	if errors.As(err, &be) {
		return !be.Retryable
	}
	code := market.ErrorCode(err)
	return err != nil && (code == market.CodeInvalid || code == market.CodeConflict)
}

// chargeDescription is the line the buyer sees on the statement; it
// depends only on the intent, so a repeated call sends the same arguments.
func chargeDescription(ci market.ChargeIntent) string {
	switch ci.Purpose {
	case market.PurposeResale:
		return fmt.Sprintf("Resold time of reservation #%d (listing #%d)", ci.ReservationID, ci.ListingID)
	case market.PurposeReplacement:
		return fmt.Sprintf("Replacement after a host failure, reservation #%d", ci.ReservationID)
	}
	return fmt.Sprintf("Reservation #%d", ci.ReservationID)
}

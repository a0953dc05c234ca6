package workflow

import (
	"context"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// Person-safe messages of paying with a saved card.
const (
	msgNoSavedMethod  = "Add a payment method on your account page first."
	msgChargePending  = "The card payment is still being processed; the reservation is confirmed as soon as it goes through."
	msgPaidOnCheckout = "This reservation has already been paid on the payment page; it is confirmed in a moment."
	msgSetupNotFound  = "That card setup could not be found. Choose “Add a card” to try again."
)

// savedEventType names an off-session charge of a saved card where a
// processor event's type would be (the payment's record and the logs).
const savedEventType = "saved_method.charge"

// PayWithSavedMethod pays a buyer's held reservation at once with the
// buyer's default saved card: an off-session charge of the reservation's
// amount whose idempotency key comes from the reservation and the card
// (market.SavedPaymentKey), recorded exactly as a completed checkout's
// payment is (recordPayment): the reservation is confirmed and the charge
// is in the ledger; a processor event for the same payment later changes
// nothing. Paying an already paid reservation again charges nothing.
//
// No saved card is a market CodeInvalid error; a declined card a
// CodeConflict error with a message for the buyer, the failure recorded
// and the reservation left held (it expires as any unpaid hold does).
func (s *Service) PayWithSavedMethod(ctx context.Context, buyerID, reservationID int64) (market.Reservation, error) {
	r, err := s.db.FindBuyerReservation(ctx, buyerID, reservationID)
	if err != nil {
		return market.Reservation{}, err
	}
	now := s.now()
	p, err := s.db.FindPayment(ctx, r.ID)
	switch {
	case err != nil && market.ErrorCode(err) != market.CodeNotFound:
		return market.Reservation{}, err
	case err == nil && p.Status == store.PaymentPaid:
		return r, nil // a repeated press: paid once, by whichever way
	}
	if err := market.Payable(r, now); err != nil {
		return market.Reservation{}, err
	}
	m, err := s.defaultMethod(ctx, buyerID)
	if err != nil {
		return market.Reservation{}, err
	}
	// A checkout the buyer already paid, whose event has not arrived yet,
	// must not be charged a second time by the saved card.
	if p.CheckoutID != "" {
		co, err := s.pay.RetrieveCheckout(ctx, p.CheckoutID)
		if err != nil {
			return market.Reservation{}, err
		}
		if co.Paid {
			return market.Reservation{}, market.Errorf(market.CodeConflict, msgPaidOnCheckout)
		}
	}
	log := s.log.With("reservation_id", r.ID, "payment_method_id", m.ID)
	pay, err := s.pay.ChargeSaved(ctx, billing.ChargeInput{
		ReservationID: r.ID, Customer: m.Customer, PaymentMethodID: m.ProcessorMethodID, Amount: r.AmountCents,
		Description:    fmt.Sprintf("Reservation #%d: %d devices, %s – %s", r.ID, r.Devices(), market.FormatTime(r.Start()), market.FormatTime(r.End())),
		IdempotencyKey: market.SavedPaymentKey(r.ID, m.ID),
	})
	if d, ok := billing.AsDecline(err); ok {
		msg := declineMessage(d, m)
		log.Info("saved card declined", "code", d.Code, "decline_code", d.DeclineCode, "payment_intent_id", d.PaymentIntentID)
		if _, ferr := s.db.RecordPaymentFailed(ctx, "", savedEventType, r.ID, d.PaymentIntentID, msg, now); ferr != nil {
			return market.Reservation{}, ferr
		}
		return market.Reservation{}, market.Errorf(market.CodeConflict, "%s The reservation stays held until %s; you can also pay on the payment page.",
			msg, market.FormatTime(r.HoldExpiresAt))
	}
	if err != nil {
		return market.Reservation{}, err
	}
	if !pay.Succeeded {
		// Cards succeed or fail at once; anything else waits for the
		// processor's payment event, which records it.
		log.Warn("saved card charge not settled yet", "payment_intent_id", pay.ID, "status", pay.Status)
		return market.Reservation{}, market.Errorf(market.CodeConflict, msgChargePending)
	}
	s.noteCharged(ctx, m, now)
	outcome, err := s.recordPayment(ctx, log, store.PaymentEvent{
		EventType: savedEventType, ReservationID: r.ID, PaymentIntentID: pay.ID, ChargeID: pay.ChargeID,
		Amount: pay.AmountReceived, Currency: market.Currency,
	}, now)
	if err != nil {
		return market.Reservation{}, err
	}
	switch outcome {
	case store.PaymentLate:
		return market.Reservation{}, market.Errorf(market.CodeConflict, "The hold ended before the payment went through, so the payment is refunded in full.")
	case store.PaymentMismatched:
		return market.Reservation{}, market.Errorf(market.CodeConflict, "This reservation was already paid another way, so this payment is refunded in full.")
	}
	return s.db.FindBuyerReservation(ctx, buyerID, r.ID)
}

// ChargeSavedMethod charges the buyer's default saved card amount
// off-session, for a payment that is not a held reservation's (a resale
// purchase); the caller records it. A retried call with the same
// idempotency key charges once. No saved card is a market CodeInvalid
// error, a declined card a CodeConflict error with a message for the
// buyer.
func (s *Service) ChargeSavedMethod(ctx context.Context, buyerID int64, amount market.Cents, description, idempotencyKey string) (billing.Payment, error) {
	m, err := s.defaultMethod(ctx, buyerID)
	if err != nil {
		return billing.Payment{}, err
	}
	pay, err := s.pay.ChargeSaved(ctx, billing.ChargeInput{
		Customer: m.Customer, PaymentMethodID: m.ProcessorMethodID, Amount: amount, Description: description, IdempotencyKey: idempotencyKey,
	})
	if d, ok := billing.AsDecline(err); ok {
		s.log.Info("saved card declined", "user_id", buyerID, "code", d.Code, "decline_code", d.DeclineCode, "payment_intent_id", d.PaymentIntentID)
		return billing.Payment{}, market.Errorf(market.CodeConflict, "%s", declineMessage(d, m))
	}
	if err != nil {
		return billing.Payment{}, err
	}
	if !pay.Succeeded {
		return billing.Payment{}, market.Errorf(market.CodeConflict, msgChargePending)
	}
	s.noteCharged(ctx, m, s.now())
	return pay, nil
}

// noteCharged records that a charge of the saved card m succeeded at now,
// which keeps it good for spot bids (market.SpotCardProblem). The charge
// stands whatever happens here: a failure is logged, not returned.
func (s *Service) noteCharged(ctx context.Context, m market.PaymentMethod, now time.Time) {
	if err := s.db.RecordPaymentMethodCharged(ctx, m.ID, now); err != nil {
		s.log.Error("saved card charge not noted", "payment_method_id", m.ID, "err", err)
	}
}

// SaveSetupCard keeps the card a completed setup checkout saved (read back
// from the processor) for the buyer who started it. userID is the buyer
// returning from the processor's page, whose setup it must be (another's
// is not found); the processor's setup-completed event passes 0 and the
// setup's own buyer is taken. Saving it again changes nothing, and a card
// the buyer has removed since is not brought back (a conflict).
func (s *Service) SaveSetupCard(ctx context.Context, userID int64, checkoutID string) (market.PaymentMethod, error) {
	sm, err := s.pay.RetrieveSetup(ctx, checkoutID)
	if err != nil {
		return market.PaymentMethod{}, err
	}
	if sm.UserID <= 0 || (userID != 0 && sm.UserID != userID) {
		return market.PaymentMethod{}, market.Errorf(market.CodeNotFound, msgSetupNotFound)
	}
	return s.db.SavePaymentMethod(ctx, sm.UserID, market.PaymentMethod{Customer: sm.Customer, ProcessorMethodID: sm.PaymentMethodID, Label: sm.Label}, s.now())
}

// defaultMethod is the buyer's default saved card, or the invalid error
// asking to add one.
func (s *Service) defaultMethod(ctx context.Context, buyerID int64) (market.PaymentMethod, error) {
	m, err := s.db.DefaultPaymentMethod(ctx, buyerID)
	if market.ErrorCode(err) == market.CodeNotFound {
		return market.PaymentMethod{}, market.Errorf(market.CodeInvalid, msgNoSavedMethod)
	}
	return m, err
}

// declineMessage tells the buyer why a saved card was not charged, in
// words of our own (never the processor's text).
func declineMessage(d *billing.Decline, m market.PaymentMethod) string {
	if d.Code == "authentication_required" {
		return fmt.Sprintf("Your bank wants to confirm payments with %s in person, which a saved card cannot do. Nothing was charged.", m.Label)
	}
	return fmt.Sprintf("%s was declined by the bank. Nothing was charged.", m.Label)
}

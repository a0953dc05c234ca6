package workflow

import (
	"context"
	"fmt"

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
// buyer's default saved card. The charge is first recorded
// (store.CreateReservationCharge: a pending charge intent, one per
// reservation in flight, so a repeated press charges once), then made
// under the intent's key and recorded exactly as a completed checkout's
// payment is (makeCharge → recordPayment): the reservation is confirmed,
// the charge is in the ledger and the intent done, in one transaction; a
// processor event for the same payment later changes nothing. A crash in
// between leaves the intent to the retrier (chargeTick). Paying an
// already paid reservation again charges nothing.
//
// No saved card is a market CodeInvalid error; a declined card a
// CodeConflict error with a message for the buyer, the failure recorded
// and the reservation left held (it expires as any unpaid hold does); a
// later try is a new charge with a new key.
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
	if _, err := s.defaultMethod(ctx, buyerID); err != nil {
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
	ci, err := s.db.CreateReservationCharge(ctx, buyerID, r.ID, now)
	if market.ErrorCode(err) == market.CodeNotFound {
		return market.Reservation{}, market.Errorf(market.CodeInvalid, msgNoSavedMethod)
	}
	if err != nil {
		return market.Reservation{}, err
	}
	return s.payReservationCharge(ctx, ci, r)
}

// payReservationCharge makes a reservation's recorded charge and turns its
// outcome into the buyer's answer: the confirmed reservation, or an error
// with a message for the buyer.
func (s *Service) payReservationCharge(ctx context.Context, ci market.ChargeIntent, r market.Reservation) (market.Reservation, error) {
	res, err := s.makeCharge(ctx, ci)
	if market.ErrorCode(err) == market.CodeConflict && res.Payment.ID == "" && !r.HoldExpiresAt.IsZero() {
		if msg := market.ErrorMessage(err); msg != msgChargePending {
			return market.Reservation{}, market.Errorf(market.CodeConflict, "%s The reservation stays held until %s; you can also pay on the payment page.",
				msg, market.FormatTime(r.HoldExpiresAt))
		}
	}
	if err != nil {
		return market.Reservation{}, err
	}
	switch res.Outcome {
	case store.PaymentLate:
		return market.Reservation{}, market.Errorf(market.CodeConflict, "The hold ended before the payment went through, so the payment is refunded in full.")
	case store.PaymentMismatched:
		return market.Reservation{}, market.Errorf(market.CodeConflict, "This reservation was already paid another way, so this payment is refunded in full.")
	}
	return s.db.FindBuyerReservation(ctx, ci.BuyerID, ci.ReservationID)
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

// declineMessage tells the buyer why a saved card (label) was not
// charged, in words of our own (never the processor's text).
func declineMessage(d *billing.Decline, label string) string {
	if d.Code == "authentication_required" {
		return fmt.Sprintf("Your bank wants to confirm payments with %s in person, which a saved card cannot do. Nothing was charged.", label)
	}
	return fmt.Sprintf("%s was declined by the bank. Nothing was charged.", label)
}

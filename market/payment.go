package market

import (
	"time"
)

// Payable checks that a reservation can still be paid at now: only a held
// reservation whose hold has not lapsed.
func Payable(r Reservation, now time.Time) error {
	switch {
	case r.State == ReservationHeld && now.Before(r.HoldExpiresAt):
		return nil
	case r.State == ReservationHeld || r.State == ReservationExpired:
		return Errorf(CodeConflict, "The hold on this reservation expired before payment completed, so its devices were released. Please book again.")
	case r.State == ReservationCancelled:
		return Errorf(CodeConflict, "This reservation was cancelled.")
	}
	return Errorf(CodeConflict, "This reservation has already been paid.")
}

// PaymentMismatch says why a payment the processor reports cannot be taken
// as a reservation's payment, or "" when it can: the amount and currency
// must be what the reservation's checkout asked for (due, in Currency), and
// a reservation already paid by one payment intent is not paid again by
// another. paidIntent is the intent already recorded as the payment ("" if
// none).
func PaymentMismatch(due Cents, paidIntent string, amount Cents, currency, intent string) string {
	switch {
	case currency != Currency:
		return "paid in " + currency + ", not " + Currency
	case amount != due:
		return "paid " + amount.String() + ", not the " + due.String() + " due"
	case paidIntent != "" && intent != "" && intent != paidIntent:
		return "a second payment for a reservation already paid by " + paidIntent
	}
	return ""
}

// PaymentExceptionKey is the idempotency key of a movement of a payment
// that did not match its checkout: "payment_exception_pi_123_refund".
func PaymentExceptionKey(paymentIntentID, kind string) string {
	return "payment_exception_" + paymentIntentID + "_" + kind
}

// PaymentExceptionEntries records money received that is not the
// reservation's payment: it is the buyer's (charge: Dr cash, Cr buyer) until
// refunded in full (refund: Dr buyer, Cr cash, written when the processor
// confirms the refund).
func PaymentExceptionEntries(reservationID, buyerID int64, paymentIntentID string, amount Cents, at time.Time) []LedgerEntry {
	if amount <= 0 {
		return nil
	}
	return []LedgerEntry{{ReservationID: reservationID, Kind: EntryCharge, Debit: AccountPlatformCash, Credit: BuyerAccount(buyerID),
		Amount: amount, StripeRef: paymentIntentID, IdempotencyKey: PaymentExceptionKey(paymentIntentID, EntryCharge), At: at}}
}

// LateCredits moves a payment that arrived after its reservation could no
// longer be confirmed from the providers back to the buyer (credit: Dr
// provider, Cr buyer), ahead of the full refund.
func LateCredits(r Reservation, at time.Time) []LedgerEntry {
	by := map[int64]Cents{}
	var ids []int64
	for _, p := range r.Pieces {
		if _, ok := by[p.ProviderID]; !ok {
			ids = append(ids, p.ProviderID)
		}
		by[p.ProviderID] += p.AmountCents
	}
	var out []LedgerEntry
	for _, id := range ids {
		if by[id] > 0 {
			out = append(out, LedgerEntry{ReservationID: r.ID, Kind: EntryCredit, Debit: ProviderAccount(id),
				Credit: BuyerAccount(r.BuyerID), Amount: by[id], IdempotencyKey: EntryKey(r.ID, EntryCredit, id), At: at})
		}
	}
	return out
}

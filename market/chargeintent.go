package market

import (
	"strconv"
	"time"
)

// ChargeIntent is an off-session charge of a buyer's saved card, recorded
// before it is made: in the same transaction that decides it (a spot
// clearing's award, a standing order's fill, a buyer's "pay with saved
// card", a resale purchase). The charge is made after that commit under
// Key(), and the intent is finished in the transaction that records the
// charge's outcome. A crash in between leaves it pending; the retrier makes
// the same call again with the same key — the processor answers with the
// first call's payment if it was made, or makes it now — and records what
// it finds, reversing (refunding in full) a payment that is no longer
// wanted. So no charge is ever made that no row explains.
type ChargeIntent struct {
	ID      int64
	Purpose ChargePurpose
	BuyerID int64
	// ReservationID is the reservation paid (PurposeReservation), or the
	// original reservation of the listing bought (PurposeResale).
	ReservationID int64
	ListingID     int64 // PurposeResale only
	// PaymentMethodID is the saved card charged; Customer and
	// ProcessorMethodID are its processor ids.
	PaymentMethodID   int64
	Customer          string
	ProcessorMethodID string
	CardLabel         string // what the buyer calls the card: "Visa •••• 4242"
	Amount            Cents
	State             ChargeState
	PaymentIntentID   string // the processor's payment, once known
	// Authorized says PaymentIntentID was authorised before the charge was
	// decided (a spot hour's hold, SpotAuthorization): making the charge
	// captures Amount of it rather than charging the card again.
	Authorized bool
	// Outcome says how a done intent ended, for people and reconciliation:
	// "paid", "late" or "mismatched" (refunded), "sold", "unsold"
	// (refunded), "declined".
	Outcome       string
	Attempts      int
	NextAttemptAt time.Time
	LastError     string
	CreatedAt     time.Time
}

// ChargePurpose is what a charge intent pays for.
type ChargePurpose string

// Charge purposes.
const (
	PurposeReservation ChargePurpose = "reservation"
	PurposeResale      ChargePurpose = "resale"
	// PurposeReplacement is the buyer's share of a dearer replacement
	// after a host failure (ReplacementSplit.BuyerShare); ReservationID is
	// the replaced rental.
	PurposeReplacement ChargePurpose = "replacement"
)

// ChargeState is where a charge intent is.
type ChargeState string

// Charge intent states.
const (
	// ChargePending: recorded; the charge may or may not have been made.
	ChargePending ChargeState = "pending"
	// ChargeDone: the charge was made and its outcome recorded.
	ChargeDone ChargeState = "done"
	// ChargeDeclined: the bank refused the card; nothing was charged.
	ChargeDeclined ChargeState = "declined"
)

// Charge outcomes of a done or declined intent.
const (
	ChargeOutcomePaid = "paid"
	ChargeOutcomeLate = "late"
	// ChargeOutcomeMismatched: the reservation was paid another way
	// meanwhile; this payment is refunded in full.
	ChargeOutcomeMismatched = "mismatched"
	ChargeOutcomeSold       = "sold"
	ChargeOutcomeUnsold     = "unsold"
	ChargeOutcomeDeclined   = "declined"
	// ChargeOutcomeUnbooked: a replacement's share was paid but the
	// replacement could not be booked any more; it is refunded in full.
	ChargeOutcomeUnbooked = "unbooked"
)

// ChargeRetryGrace is how long after its creation a pending intent is left
// to the call that created it before the retrier takes it up: the charge
// and its record normally take well under a second, and the retrier must
// not race the first call for nothing (a race would be harmless: same key,
// idempotent records).
const ChargeRetryGrace = time.Minute

// Key is the processor idempotency key of the intent's charge: one key per
// attempt (an intent is one attempt with one card), so a declined card
// followed by another card, or the same card again later, is a new intent
// with a new key, never "key already used with different arguments".
func (ci ChargeIntent) Key() string {
	return "charge_" + strconv.FormatInt(ci.ID, 10) + "_" + string(ci.Purpose) + "_" + strconv.FormatInt(ci.ReservationID, 10)
}

// Metadata is what the processor's payment carries to name the intent's
// row (and, for a reservation's payment, the reservation, so the
// processor's payment events find it).
func (ci ChargeIntent) Metadata() map[string]string {
	m := map[string]string{MetadataChargeIntentID: strconv.FormatInt(ci.ID, 10), MetadataPurpose: string(ci.Purpose)}
	switch ci.Purpose {
	case PurposeReservation:
		m[MetadataReservationID] = strconv.FormatInt(ci.ReservationID, 10)
	case PurposeResale:
		m[MetadataListingID] = strconv.FormatInt(ci.ListingID, 10)
	}
	return m
}

// Metadata keys the marketplace sets on the processor's objects.
const (
	MetadataReservationID  = "reservation_id"
	MetadataChargeIntentID = "charge_intent_id"
	MetadataPurpose        = "purpose"
	MetadataListingID      = "resale_listing_id"
)

// ChargeIntentID reads the charge intent id a processor object's metadata
// names, 0 when none.
func ChargeIntentID(metadata map[string]string) int64 {
	id, err := strconv.ParseInt(metadata[MetadataChargeIntentID], 10, 64)
	if err != nil || id <= 0 {
		return 0
	}
	return id
}

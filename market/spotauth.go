package market

import (
	"strconv"
	"time"
)

// Spot authorisations: before an hour is cleared, every live bid that
// competes for it has its maximum for the hour held on the buyer's saved
// card (an authorisation, nothing charged). Only bids whose hold succeeded
// enter the clearing, so a bidder whose card declines never wins and never
// sets the price the others pay: the hour is cleared without them, with
// their devices on offer to the other bids. Each winner's hold is then
// captured at the clearing price (never above the hold: the price is at
// most the bid's maximum, and a late clearing charges fewer minutes), and
// every other hold is released.

// SpotAuthState is where one bid's hold for one hour stands.
type SpotAuthState string

// Spot authorisation states.
const (
	SpotAuthPending    SpotAuthState = "pending"    // recorded; the hold is being (or was never answered) placed
	SpotAuthAuthorized SpotAuthState = "authorized" // held on the card; enters the clearing
	SpotAuthDeclined   SpotAuthState = "declined"   // the bank refused, or no saved card: the bid sits the hour out
	SpotAuthAwarded    SpotAuthState = "awarded"    // the bid won: its charge captures the hold
	SpotAuthReleased   SpotAuthState = "released"   // lost, or no longer needed: the hold is cancelled
)

// SpotAuthorization is one bid's hold for one hour.
type SpotAuthorization struct {
	ID, BidID, OfferID, BuyerID int64
	Hour                        time.Time
	Amount                      Cents
	// PaymentMethodID is the saved card held; Customer, ProcessorMethodID
	// and CardLabel are its processor ids and name.
	PaymentMethodID   int64
	Customer          string
	ProcessorMethodID string
	CardLabel         string
	State             SpotAuthState
	PaymentIntentID   string // the processor's authorised payment, once known
	CreatedAt         time.Time
}

// SpotAuthorizationAmount is what a bid's hold for one hour is: its
// maximum per device-hour for its devices, a whole hour (ValidateSpotBid
// bounds both, so it cannot overflow).
func SpotAuthorizationAmount(b SpotBid) Cents { return b.MaxCents * Cents(b.Devices) }

// Key is the idempotency key of the hold's processor call: a retry after a
// crash or a lost answer finds the same authorisation.
func (a SpotAuthorization) Key() string {
	return "spot_auth_" + strconv.FormatInt(a.ID, 10) + "_bid_" + strconv.FormatInt(a.BidID, 10)
}

// MetadataSpotAuthorizationID names the hold's row on the processor's
// payment.
const MetadataSpotAuthorizationID = "spot_authorization_id"

// Metadata is what the processor's authorised payment carries to name the
// row.
func (a SpotAuthorization) Metadata() map[string]string {
	return map[string]string{MetadataSpotAuthorizationID: strconv.FormatInt(a.ID, 10), MetadataPurpose: "spot_authorization"}
}

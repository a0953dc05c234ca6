// Package billing moves money for the marketplace, in market terms: buyers
// pay a reservation through a hosted checkout, buyers get partial refunds,
// providers get transfers to their connected accounts, and the processor's
// webhooks become small market-level events.
//
// Two processors implement the one interface: Stripe (NewStripe), and Local
// (NewLocal), which simulates payments and moves no money, for running the
// marketplace without a Stripe key. Neither keeps the marketplace's state:
// the store is the source of truth, and every mutating call carries an
// idempotency key derived from the reservation and the step (see
// market.EntryKey), so a retried call never charges, refunds or pays twice.
package billing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// Processor is a payment processor speaking market types.
type Processor interface {
	// Simulated reports whether the processor only pretends to move money
	// (the local processor); pages say so plainly when it does.
	Simulated() bool

	// CreateCheckout starts a hosted payment of a reservation's amount and
	// returns where to send the buyer.
	CreateCheckout(ctx context.Context, in CheckoutInput) (Checkout, error)
	// RetrieveCheckout returns a checkout's current state.
	RetrieveCheckout(ctx context.Context, checkoutID string) (Checkout, error)
	// ExpireCheckout closes an unpaid checkout so it can no longer be paid
	// (the reservation's hold ended or it was cancelled); a checkout that is
	// no longer open is left as it is.
	ExpireCheckout(ctx context.Context, checkoutID string) error
	// RetrievePayment returns a payment intent's current state.
	RetrievePayment(ctx context.Context, paymentIntentID string) (Payment, error)

	// CreateSetupCheckout starts saving a buyer's card for later payments
	// (a hosted checkout in setup mode; no money moves) and returns where
	// to send the buyer. The buyer comes back to SuccessURL with the
	// checkout's id in the query parameter "setup".
	CreateSetupCheckout(ctx context.Context, in SetupInput) (Checkout, error)
	// RetrieveSetup returns the card a completed setup checkout saved; a
	// market CodeConflict error while it is not complete.
	RetrieveSetup(ctx context.Context, checkoutID string) (SavedMethod, error)
	// ChargeSaved charges a saved card off-session (the buyer is not at the
	// card: a PaymentIntent confirmed at once). A card the bank refuses
	// is a *Decline error; a retried call with the same idempotency key
	// returns the first call's payment (or decline) and charges once.
	ChargeSaved(ctx context.Context, in ChargeInput) (Payment, error)
	// Capture takes in.Amount (at most what was authorised) of a payment
	// authorised with ChargeInput.Authorize, naming what it pays for (the
	// reservation's transfer group and metadata, as ChargeSaved would);
	// the rest of the hold is released. A retried call with the same
	// idempotency key captures once.
	Capture(ctx context.Context, in CaptureInput) (Payment, error)
	// ReleaseAuthorization cancels an authorised payment that will not be
	// captured, so the hold on the buyer's card ends; one already released
	// is left as it is.
	ReleaseAuthorization(ctx context.Context, paymentIntentID string) error

	// Refund returns amount of a payment to the buyer.
	Refund(ctx context.Context, paymentIntentID string, amount market.Cents, idempotencyKey string) (Refund, error)
	// RetrieveRefund returns a refund, for reconciliation.
	RetrieveRefund(ctx context.Context, refundID string) (Refund, error)
	// Transfer pays amount to a provider's connected account, in the
	// transfer group of the reservation's charge.
	Transfer(ctx context.Context, connectedAccountID string, amount market.Cents, transferGroup, idempotencyKey string) (Transfer, error)
	// RetrieveTransfer returns a transfer, for reconciliation.
	RetrieveTransfer(ctx context.Context, transferID string) (Transfer, error)

	// ListPayments, ListRefunds and ListTransfers return every object of
	// the kind the processor holds for the marketplace's account created
	// at or after since (everything when since is zero), so reconciliation
	// can find money that moved and no row explains.
	ListPayments(ctx context.Context, since time.Time) ([]Payment, error)
	ListRefunds(ctx context.Context, since time.Time) ([]Refund, error)
	ListTransfers(ctx context.Context, since time.Time) ([]Transfer, error)

	// CreateConnectedAccount creates a provider's Express account.
	CreateConnectedAccount(ctx context.Context, email, idempotencyKey string) (Account, error)
	// AccountLink returns a single-use onboarding URL for a connected
	// account; refreshURL is used when the link expires, returnURL when
	// the provider is done.
	AccountLink(ctx context.Context, accountID, refreshURL, returnURL string) (string, error)
	// RetrieveAccount returns a connected account's onboarding state.
	RetrieveAccount(ctx context.Context, accountID string) (Account, error)

	// ParseWebhook verifies a webhook's signature and maps it to an Event.
	// A missing or bad signature is a market CodeInvalid error; an event
	// type the marketplace does not handle is EventIgnored, not an error.
	ParseWebhook(payload []byte, signatureHeader string) (Event, error)
}

// CheckoutInput is a buyer's payment of one reservation, or of a top-up
// of the buyer's prepaid balance (TopUpID set, no reservation).
type CheckoutInput struct {
	ReservationID  int64
	TopUpID        int64 // a balance top-up (market.TopUpKey): metadata top_up_id, no transfer group
	Amount         market.Cents
	Description    string // the line the buyer sees, e.g. "Reservation #12: 16 × H100 for 48 h"
	BuyerEmail     string // optional, prefills the payment page
	SuccessURL     string // where the buyer returns after paying
	CancelURL      string // where the buyer returns after giving up
	ExpiresAt      time.Time
	IdempotencyKey string
}

// Checkout is a hosted payment page for a reservation.
type Checkout struct {
	ID              string
	URL             string // where to redirect the buyer
	ReservationID   int64
	Amount          market.Cents
	Status          string // open, complete or expired
	Paid            bool
	PaymentIntentID string // known once the buyer has paid (Stripe may create it only then)
}

// SetupInput is a buyer saving a card for later payments.
type SetupInput struct {
	UserID int64
	// Customer is the processor's customer of the buyer, from an earlier
	// saved card; empty means create one (idempotently, per user).
	Customer   string
	BuyerEmail string // optional, prefills the page and names a new customer
	SuccessURL string // where the buyer returns with the card saved; "?setup=<id>" is added
	CancelURL  string // where the buyer returns after giving up
}

// SavedMethod is a card saved by a setup checkout.
type SavedMethod struct {
	CheckoutID      string
	UserID          int64
	Customer        string // the processor's customer the card is attached to
	PaymentMethodID string
	Brand, Last4    string // "visa", "4242"
	Label           string // market.PaymentMethodLabel(Brand, Last4)
}

// ChargeInput is an off-session charge of a saved card.
type ChargeInput struct {
	// ReservationID is the reservation paid, if any: it goes in the payment
	// intent's metadata and its transfer group is "res_<id>", as a
	// checkout's, so payouts and webhooks find it. Zero for a payment that
	// is not a reservation's.
	ReservationID   int64
	Customer        string
	PaymentMethodID string
	Amount          market.Cents
	Description     string
	IdempotencyKey  string
	// Metadata names the row that explains the charge (the charge intent:
	// market.ChargeIntent.Metadata); it is kept on the payment intent.
	Metadata map[string]string
	// Authorize only holds Amount on the card (a PaymentIntent with manual
	// capture, status "requires_capture"): nothing is charged until
	// Capture, and ReleaseAuthorization ends the hold.
	Authorize bool
}

// CaptureInput is the capture of an authorised payment.
type CaptureInput struct {
	PaymentIntentID string
	Amount          market.Cents
	IdempotencyKey  string
	// ReservationID and Metadata are as ChargeInput's: they are set on the
	// payment before it is captured, so its events and payouts find the
	// reservation and reconciliation the charge.
	ReservationID int64
	Metadata      map[string]string
}

// Decline is a saved card's charge refused by the bank (or needing the
// buyer's authentication, which an off-session charge cannot ask for). No
// money moved; the buyer may pay another way.
type Decline struct {
	PaymentIntentID string // the failed payment intent, when the processor made one
	Code            string // e.g. "card_declined", "authentication_required"
	DeclineCode     string // the bank's reason, e.g. "generic_decline", "insufficient_funds"
	Err             error  // the processor's error, for logs
}

// Error describes the decline for logs.
func (d *Decline) Error() string {
	s := "billing: card declined"
	if d.Code != "" {
		s += " (" + d.Code
		if d.DeclineCode != "" {
			s += ", " + d.DeclineCode
		}
		s += ")"
	}
	if d.PaymentIntentID != "" {
		s += " in " + d.PaymentIntentID
	}
	if d.Err != nil {
		s += ": " + d.Err.Error()
	}
	return s
}

// Unwrap returns the processor's error.
func (d *Decline) Unwrap() error { return d.Err }

// AsDecline returns the *Decline in err's chain, if any.
func AsDecline(err error) (*Decline, bool) {
	var d *Decline
	ok := errors.As(err, &d)
	return d, ok
}

// Payment is the state of a payment intent.
type Payment struct {
	ID             string
	ReservationID  int64
	Amount         market.Cents
	AmountReceived market.Cents
	Status         string // Stripe's status: succeeded, processing, requires_payment_method, canceled…
	Succeeded      bool
	TransferGroup  string
	ChargeID       string
	// Metadata is what the marketplace set on the payment (the
	// reservation's id, the charge intent's), for reconciliation.
	Metadata map[string]string
}

// Refund is money returned to a buyer.
type Refund struct {
	ID              string
	PaymentIntentID string
	Amount          market.Cents
	Status          string // succeeded, pending, failed…
}

// Transfer is money paid to a provider's connected account.
type Transfer struct {
	ID            string
	AccountID     string
	Amount        market.Cents
	TransferGroup string
}

// Account is a provider's connected account and how far onboarding got.
type Account struct {
	ID               string
	Email            string
	DetailsSubmitted bool
	ChargesEnabled   bool
	PayoutsEnabled   bool
}

// Onboarded reports whether the account can receive transfers. Until it
// can, a provider's payouts are held (settlement waits) rather than lost.
func (a Account) Onboarded() bool { return a.DetailsSubmitted && a.PayoutsEnabled }

// EventType is a market-level webhook event type.
type EventType string

// Event types. Every other processor event is EventIgnored.
const (
	EventPaymentSucceeded  EventType = "payment_succeeded"
	EventPaymentFailed     EventType = "payment_failed"
	EventCheckoutCompleted EventType = "checkout_completed"
	EventChargeRefunded    EventType = "charge_refunded"
	EventDisputeCreated    EventType = "dispute_created"
	EventDisputeClosed     EventType = "dispute_closed"
	EventAccountUpdated    EventType = "account_updated"
	// EventSetupCompleted: a checkout in setup mode saved a buyer's card
	// (UserID, CheckoutID); the card is kept even if the buyer never comes
	// back to the return page.
	EventSetupCompleted EventType = "setup_completed"
	EventIgnored        EventType = "ignored"
)

// Event is a verified webhook event, reduced to what the marketplace acts on.
type Event struct {
	ID         string // the processor's event id: deduplicate on it
	Type       EventType
	StripeType string // the processor's own type, e.g. "payment_intent.succeeded"
	Created    time.Time

	// ReservationID is taken from the object's metadata, the checkout's
	// client reference or the transfer group; zero when none says.
	ReservationID int64
	// TopUpID is a balance top-up's id from the checkout's metadata
	// (MetadataTopUpID); zero for a reservation's payment.
	TopUpID         int64
	PaymentIntentID string
	CheckoutID      string
	ChargeID        string
	DisputeID       string
	// AmountCents is the payment's amount (payment and checkout events),
	// the total refunded so far (charge_refunded) or the disputed amount.
	AmountCents    market.Cents
	Currency       string // lower-case ISO code of AmountCents, e.g. "usd"
	DisputeStatus  string // dispute_closed: the bank's decision, "won" or "lost"
	PaymentStatus  string // checkout_completed: "paid" or "unpaid" (delayed methods)
	FailureMessage string // payment_failed

	UserID int64 // setup_completed: the buyer who started the setup

	AccountID        string // account_updated
	DetailsSubmitted bool
	ChargesEnabled   bool
	PayoutsEnabled   bool
}

// MetadataReservationID is the metadata key carrying the reservation id on
// checkouts and payment intents.
const MetadataReservationID = market.MetadataReservationID

// MetadataUserID is the metadata key carrying the marketplace's user id on
// customers and setup checkouts.
const MetadataUserID = "user_id"

// MetadataTopUpID is the metadata key carrying a balance top-up's id on
// its checkout and payment intent.
const MetadataTopUpID = "top_up_id"

// CustomerKey is the idempotency key of creating a user's customer at the
// processor, so a retried first setup creates one customer.
func CustomerKey(userID int64) string { return "user_" + strconv.FormatInt(userID, 10) + "_customer" }

// errSetupIncomplete is RetrieveSetup's answer for a setup checkout the
// buyer has not finished.
var errSetupIncomplete = market.Errorf(market.CodeConflict, "The card was not saved: the card page was not completed. Choose “Add a card” to try again.")

// withQuery adds a query parameter (already encoded) to a URL.
func withQuery(u, param string) string {
	if strings.Contains(u, "?") {
		return u + "&" + param
	}
	return u + "?" + param
}

// reservationIDFrom reads a reservation id from metadata, a client
// reference or a transfer group ("res_<id>").
func reservationIDFrom(metadata map[string]string, clientReference, transferGroup string) int64 {
	for _, s := range []string{metadata[MetadataReservationID], clientReference, strings.TrimPrefix(transferGroup, "res_")} {
		if id, err := strconv.ParseInt(s, 10, 64); err == nil && id > 0 {
			return id
		}
	}
	return 0
}

// Error is a failed call to the payment processor. Its text is for logs,
// never for people (market.ErrorCode reports it as internal).
type Error struct {
	Op        string // what was attempted, e.g. "refund pi_123"
	Retryable bool   // the same call with the same idempotency key may succeed later
	Status    int    // the processor's HTTP status, 0 for network failures
	Code      string // the processor's error code, e.g. "resource_missing"
	RequestID string
	Err       error
}

// Error describes the failed call for logs.
func (e *Error) Error() string {
	s := "billing: " + e.Op
	if e.Status != 0 {
		s += fmt.Sprintf(" (status %d", e.Status)
		if e.Code != "" {
			s += ", " + e.Code
		}
		if e.RequestID != "" {
			s += ", request " + e.RequestID
		}
		s += ")"
	}
	if e.Retryable {
		s += " [retryable]"
	}
	return s + ": " + e.Err.Error()
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Retryable reports whether err is a processor failure worth retrying with
// the same idempotency key: timeouts, network failures, rate limits, the
// processor's own errors and concurrent use of a key. Invalid requests and
// declines are not.
func Retryable(err error) bool {
	var be *Error
	if errors.As(err, &be) {
		return be.Retryable
	}
	return false
}

// retryableStatus classifies a processor HTTP status.
func retryableStatus(status int) bool {
	return status == 0 || status == http.StatusConflict || status == http.StatusTooManyRequests || status >= 500
}

// checkMutation validates the arguments every money-moving call shares.
func checkMutation(op string, amount market.Cents, idempotencyKey string) error {
	if amount <= 0 {
		return market.Errorf(market.CodeInvalid, "The amount to %s must be positive.", op)
	}
	if strings.TrimSpace(idempotencyKey) == "" {
		return fmt.Errorf("billing: %s without an idempotency key", op)
	}
	return nil
}

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

	// Refund returns amount of a payment to the buyer.
	Refund(ctx context.Context, paymentIntentID string, amount market.Cents, idempotencyKey string) (Refund, error)
	// RetrieveRefund returns a refund, for reconciliation.
	RetrieveRefund(ctx context.Context, refundID string) (Refund, error)
	// Transfer pays amount to a provider's connected account, in the
	// transfer group of the reservation's charge.
	Transfer(ctx context.Context, connectedAccountID string, amount market.Cents, transferGroup, idempotencyKey string) (Transfer, error)
	// RetrieveTransfer returns a transfer, for reconciliation.
	RetrieveTransfer(ctx context.Context, transferID string) (Transfer, error)

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

// CheckoutInput is a buyer's payment of one reservation.
type CheckoutInput struct {
	ReservationID  int64
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
	EventIgnored           EventType = "ignored"
)

// Event is a verified webhook event, reduced to what the marketplace acts on.
type Event struct {
	ID         string // the processor's event id: deduplicate on it
	Type       EventType
	StripeType string // the processor's own type, e.g. "payment_intent.succeeded"
	Created    time.Time

	// ReservationID is taken from the object's metadata, the checkout's
	// client reference or the transfer group; zero when none says.
	ReservationID   int64
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

	AccountID        string // account_updated
	DetailsSubmitted bool
	ChargesEnabled   bool
	PayoutsEnabled   bool
}

// MetadataReservationID is the metadata key carrying the reservation id on
// checkouts and payment intents.
const MetadataReservationID = "reservation_id"

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

package billing

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// LocalConfig configures the local test processor.
type LocalConfig struct {
	// WebhookSecret verifies webhooks posted to the local processor, signed
	// like Stripe's (see SignTestEvent). Empty means "local_whsec".
	WebhookSecret string
	// PayPath is the web layer's page that simulates the hosted payment
	// page; the checkout id is appended. Empty means "/pay/local/".
	PayPath string
	// OnboardPath is the web layer's page that simulates Express
	// onboarding; the account id is appended. Empty means "/connect/local/".
	OnboardPath string
}

// Local is the local test processor, used when no Stripe key is configured.
// It moves no money: checkouts point at a page of the marketplace itself
// (PayPath), which must say plainly that payment is simulated, and the buyer
// "pays" there (CompleteCheckout). Refunds, transfers and accounts are
// recorded in memory with deterministic fake ids derived from the
// idempotency key ("local_re_<hash>"), so a retried call returns the same
// object; a key reused with different arguments is a conflict, as at Stripe.
// Its memory is lost on restart; the store remains the source of truth.
type Local struct {
	cfg LocalConfig

	mu        sync.Mutex
	checkouts map[string]*localCheckout // by checkout id
	payments  map[string]*Payment       // by payment intent id
	refunds   map[string]Refund         // by idempotency key
	transfers map[string]Transfer       // by idempotency key
	accounts  map[string]*localAccount  // by account id
}

type localCheckout struct {
	in       CheckoutInput
	checkout Checkout
}

type localAccount struct {
	account Account
	key     string
}

// NewLocal returns a local test processor.
func NewLocal(cfg LocalConfig) *Local {
	if cfg.WebhookSecret == "" {
		cfg.WebhookSecret = "local_whsec"
	}
	if cfg.PayPath == "" {
		cfg.PayPath = "/pay/local/"
	}
	if cfg.OnboardPath == "" {
		cfg.OnboardPath = "/connect/local/"
	}
	return &Local{
		cfg: cfg, checkouts: map[string]*localCheckout{}, payments: map[string]*Payment{},
		refunds: map[string]Refund{}, transfers: map[string]Transfer{}, accounts: map[string]*localAccount{},
	}
}

// localID derives a deterministic fake id from an idempotency key.
func localID(prefix, key string) string {
	sum := sha256.Sum256([]byte(key))
	return "local_" + prefix + "_" + hex.EncodeToString(sum[:8])
}

func reusedKey(key string) error {
	return market.Errorf(market.CodeConflict, "The idempotency key %q was already used with different arguments.", key)
}

func localNotFound(what, id string) error {
	return market.Errorf(market.CodeNotFound, "No simulated %s %q (the local processor forgets everything on restart).", what, id)
}

// Simulated is true: the local processor moves no money.
func (l *Local) Simulated() bool { return true }

// CreateCheckout records a simulated checkout whose URL is PayPath + id.
func (l *Local) CreateCheckout(_ context.Context, in CheckoutInput) (Checkout, error) {
	if err := checkMutation("charge", in.Amount, in.IdempotencyKey); err != nil {
		return Checkout{}, err
	}
	if in.ReservationID <= 0 {
		return Checkout{}, fmt.Errorf("billing: checkout needs a reservation")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	id := localID("cs", in.IdempotencyKey)
	if c, ok := l.checkouts[id]; ok {
		if c.in != in {
			return Checkout{}, reusedKey(in.IdempotencyKey)
		}
		return c.checkout, nil
	}
	c := &localCheckout{in: in, checkout: Checkout{
		ID: id, URL: l.cfg.PayPath + url.PathEscape(id), ReservationID: in.ReservationID, Amount: in.Amount, Status: "open",
	}}
	l.checkouts[id] = c
	return c.checkout, nil
}

// RetrieveCheckout returns a simulated checkout.
func (l *Local) RetrieveCheckout(_ context.Context, checkoutID string) (Checkout, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.checkouts[checkoutID]
	if !ok {
		return Checkout{}, localNotFound("checkout", checkoutID)
	}
	return c.checkout, nil
}

// CheckoutInput returns what a simulated checkout was created with, for the
// simulated payment page to show (amount, description, return URLs).
func (l *Local) CheckoutInput(checkoutID string) (CheckoutInput, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.checkouts[checkoutID]
	if !ok {
		return CheckoutInput{}, localNotFound("checkout", checkoutID)
	}
	return c.in, nil
}

// CompleteCheckout is the buyer pressing "pay" (or "fail") on the simulated
// payment page. It returns the events Stripe would send, for the caller to
// handle exactly like verified webhooks: on success checkout_completed then
// payment_succeeded; on failure payment_failed. Completing a completed
// checkout again returns the same events (same ids), so handling stays
// idempotent.
func (l *Local) CompleteCheckout(checkoutID string, succeed bool, now time.Time) ([]Event, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.checkouts[checkoutID]
	if !ok {
		return nil, localNotFound("checkout", checkoutID)
	}
	if c.checkout.Status == "expired" {
		return nil, market.Errorf(market.CodeConflict, "This payment page has expired.")
	}
	piID := localID("pi", c.in.IdempotencyKey)
	if c.checkout.Status != "complete" {
		if !succeed {
			return []Event{{
				ID: localID("evt", piID+":failed:"+strconv.FormatInt(now.UnixNano(), 10)), Type: EventPaymentFailed,
				StripeType: "payment_intent.payment_failed", Created: now.UTC(), ReservationID: c.in.ReservationID,
				PaymentIntentID: piID, AmountCents: c.in.Amount, FailureMessage: "Simulated decline (test mode).",
			}}, nil
		}
		c.checkout.Status, c.checkout.Paid, c.checkout.PaymentIntentID = "complete", true, piID
		l.payments[piID] = &Payment{
			ID: piID, ReservationID: c.in.ReservationID, Amount: c.in.Amount, AmountReceived: c.in.Amount,
			Status: "succeeded", Succeeded: true, TransferGroup: market.TransferGroup(c.in.ReservationID),
			ChargeID: localID("ch", c.in.IdempotencyKey),
		}
	}
	p := l.payments[piID]
	return []Event{
		{ID: localID("evt", checkoutID+":completed"), Type: EventCheckoutCompleted, StripeType: "checkout.session.completed",
			Created: now.UTC(), ReservationID: c.in.ReservationID, CheckoutID: checkoutID, PaymentIntentID: piID,
			AmountCents: c.in.Amount, PaymentStatus: "paid"},
		{ID: localID("evt", piID+":succeeded"), Type: EventPaymentSucceeded, StripeType: "payment_intent.succeeded",
			Created: now.UTC(), ReservationID: c.in.ReservationID, PaymentIntentID: piID, ChargeID: p.ChargeID, AmountCents: c.in.Amount},
	}, nil
}

// ExpireCheckout closes an unpaid simulated checkout, as Stripe does at its
// expiry time.
func (l *Local) ExpireCheckout(checkoutID string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.checkouts[checkoutID]
	if !ok {
		return localNotFound("checkout", checkoutID)
	}
	if c.checkout.Status == "open" {
		c.checkout.Status = "expired"
	}
	return nil
}

// RetrievePayment returns a simulated payment.
func (l *Local) RetrievePayment(_ context.Context, paymentIntentID string) (Payment, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.payments[paymentIntentID]
	if !ok {
		return Payment{}, localNotFound("payment", paymentIntentID)
	}
	return *p, nil
}

// Refund records a simulated refund. A payment this processor remembers
// cannot be refunded beyond what was paid; one it has forgotten (after a
// restart) is taken on trust, since no money moves.
func (l *Local) Refund(_ context.Context, paymentIntentID string, amount market.Cents, idempotencyKey string) (Refund, error) {
	if err := checkMutation("refund", amount, idempotencyKey); err != nil {
		return Refund{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if r, ok := l.refunds[idempotencyKey]; ok {
		if r.PaymentIntentID != paymentIntentID || r.Amount != amount {
			return Refund{}, reusedKey(idempotencyKey)
		}
		return r, nil
	}
	if p, ok := l.payments[paymentIntentID]; ok {
		var refunded market.Cents
		for _, r := range l.refunds {
			if r.PaymentIntentID == paymentIntentID {
				refunded += r.Amount
			}
		}
		if refunded+amount > p.AmountReceived {
			return Refund{}, market.Errorf(market.CodeInvalid, "Cannot refund %s: only %s of %s is left to refund.", amount, p.AmountReceived-refunded, p.AmountReceived)
		}
	}
	r := Refund{ID: localID("re", idempotencyKey), PaymentIntentID: paymentIntentID, Amount: amount, Status: "succeeded"}
	l.refunds[idempotencyKey] = r
	return r, nil
}

// RetrieveRefund returns a simulated refund.
func (l *Local) RetrieveRefund(_ context.Context, refundID string) (Refund, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.refunds {
		if r.ID == refundID {
			return r, nil
		}
	}
	return Refund{}, localNotFound("refund", refundID)
}

// Transfer records a simulated transfer.
func (l *Local) Transfer(_ context.Context, connectedAccountID string, amount market.Cents, transferGroup, idempotencyKey string) (Transfer, error) {
	if err := checkMutation("transfer", amount, idempotencyKey); err != nil {
		return Transfer{}, err
	}
	if connectedAccountID == "" {
		return Transfer{}, fmt.Errorf("billing: transfer without a destination account")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t := Transfer{ID: localID("tr", idempotencyKey), AccountID: connectedAccountID, Amount: amount, TransferGroup: transferGroup}
	if old, ok := l.transfers[idempotencyKey]; ok {
		if old != t {
			return Transfer{}, reusedKey(idempotencyKey)
		}
		return old, nil
	}
	l.transfers[idempotencyKey] = t
	return t, nil
}

// RetrieveTransfer returns a simulated transfer.
func (l *Local) RetrieveTransfer(_ context.Context, transferID string) (Transfer, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range l.transfers {
		if t.ID == transferID {
			return t, nil
		}
	}
	return Transfer{}, localNotFound("transfer", transferID)
}

// CreateConnectedAccount records a simulated Express account, not yet
// onboarded.
func (l *Local) CreateConnectedAccount(_ context.Context, email, idempotencyKey string) (Account, error) {
	if strings.TrimSpace(idempotencyKey) == "" {
		return Account{}, fmt.Errorf("billing: create account without an idempotency key")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	id := localID("acct", idempotencyKey)
	if a, ok := l.accounts[id]; ok {
		if a.account.Email != email {
			return Account{}, reusedKey(idempotencyKey)
		}
		return a.account, nil
	}
	a := &localAccount{account: Account{ID: id, Email: email}, key: idempotencyKey}
	l.accounts[id] = a
	return a.account, nil
}

// AccountLink returns the simulated onboarding page, OnboardPath + id, with
// the return and refresh URLs as query parameters.
func (l *Local) AccountLink(_ context.Context, accountID, refreshURL, returnURL string) (string, error) {
	if accountID == "" {
		return "", fmt.Errorf("billing: account link without an account")
	}
	q := url.Values{"return": {returnURL}, "refresh": {refreshURL}}
	return l.cfg.OnboardPath + url.PathEscape(accountID) + "?" + q.Encode(), nil
}

// CompleteOnboarding is the provider finishing the simulated onboarding
// page: the account can take transfers. It returns the account_updated event
// Stripe would send. An account forgotten on restart is recreated.
func (l *Local) CompleteOnboarding(accountID string, now time.Time) (Event, error) {
	if !strings.HasPrefix(accountID, "local_acct_") {
		return Event{}, localNotFound("account", accountID)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.accounts[accountID]
	if !ok {
		a = &localAccount{account: Account{ID: accountID}}
		l.accounts[accountID] = a
	}
	a.account.DetailsSubmitted, a.account.ChargesEnabled, a.account.PayoutsEnabled = true, true, true
	return Event{
		ID: localID("evt", accountID+":onboarded"), Type: EventAccountUpdated, StripeType: "account.updated", Created: now.UTC(),
		AccountID: accountID, DetailsSubmitted: true, ChargesEnabled: true, PayoutsEnabled: true,
	}, nil
}

// RetrieveAccount returns a simulated account. One forgotten on restart
// reads as not onboarded.
func (l *Local) RetrieveAccount(_ context.Context, accountID string) (Account, error) {
	if !strings.HasPrefix(accountID, "local_acct_") {
		return Account{}, localNotFound("account", accountID)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if a, ok := l.accounts[accountID]; ok {
		return a.account, nil
	}
	return Account{ID: accountID}, nil
}

// ParseWebhook verifies a payload signed with the local webhook secret, in
// Stripe's format (see SignTestEvent), and maps it like Stripe's.
func (l *Local) ParseWebhook(payload []byte, signatureHeader string) (Event, error) {
	return parseWebhook(payload, signatureHeader, l.cfg.WebhookSecret)
}

// Compile-time checks that both processors implement Processor.
var (
	_ Processor = (*Stripe)(nil)
	_ Processor = (*Local)(nil)
)

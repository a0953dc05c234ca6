package billing

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// LocalStore keeps the local test processor's objects, so that they survive
// a restart as Stripe's do. An object is its kind (checkout, payment,
// refund, transfer or account), an id unique within the kind, the
// idempotency key that created it, the object it belongs to (a refund's
// payment intent, a payment's checkout, a transfer's account), its amount,
// and its other fields, which billing encodes and the store keeps without
// reading them. *store.DB implements it.
type LocalStore interface {
	// CreateLocalObject stores an object unless one of the same kind and id
	// exists, and returns the data stored under that id: data itself, or
	// the earlier object's for the caller to compare (a retried call, or an
	// idempotency key reused with other arguments).
	CreateLocalObject(ctx context.Context, kind, id, idempotencyKey, parentID string, amount market.Cents, data []byte) ([]byte, error)
	// UpdateLocalObject replaces the data of a stored object; a market
	// CodeNotFound error when there is none.
	UpdateLocalObject(ctx context.Context, kind, id string, data []byte) error
	// FindLocalObject returns a stored object's data; a market CodeNotFound
	// error when there is none.
	FindLocalObject(ctx context.Context, kind, id string) ([]byte, error)
	// SumLocalAmounts returns the total amount of the objects of a kind
	// that belong to parentID (e.g. everything refunded of a payment).
	SumLocalAmounts(ctx context.Context, kind, parentID string) (market.Cents, error)
	// ListLocalObjects returns every stored object of a kind: their ids
	// and, at the same index, their data.
	ListLocalObjects(ctx context.Context, kind string) (ids []string, data [][]byte, err error)
}

// The kinds of objects the local processor stores.
const (
	localCheckout = "checkout"
	localPayment  = "payment"
	localRefund   = "refund"
	localTransfer = "transfer"
	localAccount  = "account"
	localSetup    = "setup"  // a setup checkout: a card being saved
	localMethod   = "method" // a saved test card
)

// LocalConfig configures the local test processor.
type LocalConfig struct {
	// Store keeps the processor's objects (the marketplace's database).
	// Without one every call fails: a processor that forgets its payments
	// on restart leaves the ledger unreconcilable.
	Store LocalStore
	// PayPath is the web layer's page that simulates the hosted payment
	// page; the checkout id is appended. Empty means "/pay/local/".
	PayPath string
	// OnboardPath is the web layer's page that simulates Express
	// onboarding; the account id is appended. Empty means "/connect/local/".
	OnboardPath string
	// SetupPath is the web layer's page that simulates the hosted page
	// saving a card (a setup checkout); the checkout id is appended. Empty
	// means "/setup/local/".
	SetupPath string
}

// Local is the local test processor, used when no Stripe key is configured.
// It moves no money: checkouts point at a page of the marketplace itself
// (PayPath), which must say plainly that payment is simulated, and the buyer
// "pays" there (CompleteCheckout). Checkouts, payments, refunds, transfers
// and accounts are kept in LocalConfig.Store with deterministic fake ids
// derived from the idempotency key ("local_re_<hash>"), so a retried call
// returns the same object, also after a restart; a key reused with
// different arguments is a conflict, as at Stripe.
//
// Its events are applied inside the process (CompleteCheckout,
// CompleteOnboarding), so it accepts no webhooks at all: nobody outside can
// sign an event it would believe.
type Local struct {
	cfg   LocalConfig
	store LocalStore

	// mu serialises each check-then-write (an idempotency key's first use,
	// the refundable amount left) within the process.
	mu sync.Mutex
}

// NewLocal returns a local test processor keeping its objects in cfg.Store.
func NewLocal(cfg LocalConfig) *Local {
	if cfg.PayPath == "" {
		cfg.PayPath = "/pay/local/"
	}
	if cfg.OnboardPath == "" {
		cfg.OnboardPath = "/connect/local/"
	}
	if cfg.SetupPath == "" {
		cfg.SetupPath = "/setup/local/"
	}
	st := cfg.Store
	if st == nil {
		st = noLocalStore{}
	}
	return &Local{cfg: cfg, store: st}
}

// noLocalStore is the store of a Local built without one: every call fails.
type noLocalStore struct{}

var errNoLocalStore = errors.New("billing: the local processor has no store (LocalConfig.Store)")

func (noLocalStore) CreateLocalObject(context.Context, string, string, string, string, market.Cents, []byte) ([]byte, error) {
	return nil, errNoLocalStore
}
func (noLocalStore) UpdateLocalObject(context.Context, string, string, []byte) error {
	return errNoLocalStore
}
func (noLocalStore) FindLocalObject(context.Context, string, string) ([]byte, error) {
	return nil, errNoLocalStore
}
func (noLocalStore) SumLocalAmounts(context.Context, string, string) (market.Cents, error) {
	return 0, errNoLocalStore
}
func (noLocalStore) ListLocalObjects(context.Context, string) ([]string, [][]byte, error) {
	return nil, nil, errNoLocalStore
}

// The stored forms of the local processor's objects. Their JSON names are
// the stored format: rename a Go field freely, never a tag.
type (
	checkoutRecord struct {
		ReservationID   int64        `json:"reservation_id"`
		TopUpID         int64        `json:"top_up_id,omitempty"`
		Amount          market.Cents `json:"amount"`
		Description     string       `json:"description"`
		BuyerEmail      string       `json:"buyer_email"`
		SuccessURL      string       `json:"success_url"`
		CancelURL       string       `json:"cancel_url"`
		ExpiresAt       time.Time    `json:"expires_at"`
		IdempotencyKey  string       `json:"idempotency_key"`
		Status          string       `json:"status"` // open, complete or expired
		PaymentIntentID string       `json:"payment_intent_id"`
	}
	paymentRecord struct {
		CheckoutID     string       `json:"checkout_id"`
		ReservationID  int64        `json:"reservation_id"`
		Amount         market.Cents `json:"amount"`
		AmountReceived market.Cents `json:"amount_received"`
		Status         string       `json:"status"`
		TransferGroup  string       `json:"transfer_group"`
		ChargeID       string       `json:"charge_id"`
		// Off-session charges of a saved card (ChargeSaved).
		PaymentMethodID string `json:"payment_method_id,omitempty"`
		Customer        string `json:"customer,omitempty"`
		DeclineCode     string `json:"decline_code,omitempty"`
		// Metadata of an off-session charge (ChargeInput.Metadata).
		Metadata map[string]string `json:"metadata,omitempty"`
		// CaptureKey is the idempotency key of the capture of an
		// authorised payment (ChargeInput.Authorize).
		CaptureKey string `json:"capture_key,omitempty"`
	}
	setupRecord struct {
		UserID          int64  `json:"user_id"`
		Customer        string `json:"customer"`
		BuyerEmail      string `json:"buyer_email"`
		SuccessURL      string `json:"success_url"`
		CancelURL       string `json:"cancel_url"`
		Status          string `json:"status"` // open or complete
		PaymentMethodID string `json:"payment_method_id"`
	}
	methodRecord struct {
		UserID   int64  `json:"user_id"`
		Customer string `json:"customer"`
		Brand    string `json:"brand"`
		Last4    string `json:"last4"`
		Declines bool   `json:"declines"`
	}
	refundRecord struct {
		PaymentIntentID string       `json:"payment_intent_id"`
		Amount          market.Cents `json:"amount"`
		Status          string       `json:"status"`
	}
	transferRecord struct {
		AccountID     string       `json:"account_id"`
		Amount        market.Cents `json:"amount"`
		TransferGroup string       `json:"transfer_group"`
	}
	accountRecord struct {
		Email            string `json:"email"`
		DetailsSubmitted bool   `json:"details_submitted"`
		ChargesEnabled   bool   `json:"charges_enabled"`
		PayoutsEnabled   bool   `json:"payouts_enabled"`
	}
)

func newCheckoutRecord(in CheckoutInput) checkoutRecord {
	expires := in.ExpiresAt
	if !expires.IsZero() {
		expires = expires.UTC()
	}
	return checkoutRecord{
		ReservationID: in.ReservationID, TopUpID: in.TopUpID, Amount: in.Amount, Description: in.Description, BuyerEmail: in.BuyerEmail,
		SuccessURL: in.SuccessURL, CancelURL: in.CancelURL, ExpiresAt: expires, IdempotencyKey: in.IdempotencyKey, Status: "open",
	}
}

// sameInput reports whether two checkouts were created with the same
// arguments.
func (c checkoutRecord) sameInput(o checkoutRecord) bool {
	return c.ReservationID == o.ReservationID && c.TopUpID == o.TopUpID && c.Amount == o.Amount && c.Description == o.Description &&
		c.BuyerEmail == o.BuyerEmail && c.SuccessURL == o.SuccessURL && c.CancelURL == o.CancelURL &&
		c.ExpiresAt.Equal(o.ExpiresAt) && c.IdempotencyKey == o.IdempotencyKey
}

func (c checkoutRecord) input() CheckoutInput {
	return CheckoutInput{
		ReservationID: c.ReservationID, TopUpID: c.TopUpID, Amount: c.Amount, Description: c.Description, BuyerEmail: c.BuyerEmail,
		SuccessURL: c.SuccessURL, CancelURL: c.CancelURL, ExpiresAt: c.ExpiresAt, IdempotencyKey: c.IdempotencyKey,
	}
}

func (l *Local) checkout(id string, c checkoutRecord) Checkout {
	return Checkout{
		ID: id, URL: l.cfg.PayPath + url.PathEscape(id), ReservationID: c.ReservationID, Amount: c.Amount,
		Status: c.Status, Paid: c.Status == "complete", PaymentIntentID: c.PaymentIntentID,
	}
}

func (p paymentRecord) payment(id string) Payment {
	return Payment{
		ID: id, ReservationID: p.ReservationID, Amount: p.Amount, AmountReceived: p.AmountReceived, Status: p.Status,
		Succeeded: p.Status == "succeeded", TransferGroup: p.TransferGroup, ChargeID: p.ChargeID, Metadata: p.Metadata,
	}
}

func (r refundRecord) refund(id string) Refund {
	return Refund{ID: id, PaymentIntentID: r.PaymentIntentID, Amount: r.Amount, Status: r.Status}
}

func (t transferRecord) transfer(id string) Transfer {
	return Transfer{ID: id, AccountID: t.AccountID, Amount: t.Amount, TransferGroup: t.TransferGroup}
}

func (a accountRecord) account(id string) Account {
	return Account{ID: id, Email: a.Email, DetailsSubmitted: a.DetailsSubmitted, ChargesEnabled: a.ChargesEnabled, PayoutsEnabled: a.PayoutsEnabled}
}

// createObject stores rec as a new object of kind unless the id is taken,
// and returns the stored object, new or earlier.
func createObject[T any](ctx context.Context, l *Local, kind, id, key, parentID string, amount market.Cents, rec T) (T, error) {
	var stored T
	data, err := json.Marshal(rec)
	if err != nil {
		return stored, fmt.Errorf("billing: local %s %s: encode: %w", kind, id, err)
	}
	data, err = l.store.CreateLocalObject(ctx, kind, id, key, parentID, amount, data)
	if err != nil {
		return stored, fmt.Errorf("billing: local %s %s: store: %w", kind, id, err)
	}
	if err := json.Unmarshal(data, &stored); err != nil {
		return stored, fmt.Errorf("billing: local %s %s: decode: %w", kind, id, err)
	}
	return stored, nil
}

// findObject loads an object; one the store does not have is a market
// not-found error.
func findObject[T any](ctx context.Context, l *Local, kind, id string) (T, error) {
	var rec T
	data, err := l.store.FindLocalObject(ctx, kind, id)
	if market.ErrorCode(err) == market.CodeNotFound {
		return rec, localNotFound(kind, id)
	}
	if err != nil {
		return rec, fmt.Errorf("billing: local %s %s: store: %w", kind, id, err)
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return rec, fmt.Errorf("billing: local %s %s: decode: %w", kind, id, err)
	}
	return rec, nil
}

// updateObject replaces a stored object's fields.
func updateObject[T any](ctx context.Context, l *Local, kind, id string, rec T) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("billing: local %s %s: encode: %w", kind, id, err)
	}
	if err := l.store.UpdateLocalObject(ctx, kind, id, data); err != nil {
		return fmt.Errorf("billing: local %s %s: store: %w", kind, id, err)
	}
	return nil
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
	return market.Errorf(market.CodeNotFound, "No simulated %s %q.", what, id)
}

// isNotFound reports whether err is a market not-found error.
func isNotFound(err error) bool { return market.ErrorCode(err) == market.CodeNotFound }

// Simulated is true: the local processor moves no money.
func (l *Local) Simulated() bool { return true }

// CreateCheckout records a simulated checkout whose URL is PayPath + id.
func (l *Local) CreateCheckout(ctx context.Context, in CheckoutInput) (Checkout, error) {
	if err := checkMutation("charge", in.Amount, in.IdempotencyKey); err != nil {
		return Checkout{}, err
	}
	if in.ReservationID <= 0 && in.TopUpID <= 0 {
		return Checkout{}, fmt.Errorf("billing: checkout needs a reservation or a top-up")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	id := localID("cs", in.IdempotencyKey)
	rec := newCheckoutRecord(in)
	stored, err := createObject(ctx, l, localCheckout, id, in.IdempotencyKey, "", in.Amount, rec)
	if err != nil {
		return Checkout{}, err
	}
	if !stored.sameInput(rec) {
		return Checkout{}, reusedKey(in.IdempotencyKey)
	}
	return l.checkout(id, stored), nil
}

// RetrieveCheckout returns a simulated checkout.
func (l *Local) RetrieveCheckout(ctx context.Context, checkoutID string) (Checkout, error) {
	c, err := findObject[checkoutRecord](ctx, l, localCheckout, checkoutID)
	if err != nil {
		return Checkout{}, err
	}
	return l.checkout(checkoutID, c), nil
}

// CheckoutInput returns what a simulated checkout was created with, for the
// simulated payment page to show (amount, description, return URLs).
func (l *Local) CheckoutInput(checkoutID string) (CheckoutInput, error) {
	c, err := findObject[checkoutRecord](context.Background(), l, localCheckout, checkoutID)
	if err != nil {
		return CheckoutInput{}, err
	}
	return c.input(), nil
}

// CompleteCheckout is the buyer pressing "pay" (or "fail") on the simulated
// payment page. It returns the events Stripe would send, for the caller to
// handle exactly like verified webhooks: on success checkout_completed then
// payment_succeeded; on failure payment_failed. Completing a completed
// checkout again returns the same events (same ids), so handling stays
// idempotent.
func (l *Local) CompleteCheckout(checkoutID string, succeed bool, now time.Time) ([]Event, error) {
	ctx := context.Background()
	l.mu.Lock()
	defer l.mu.Unlock()
	c, err := findObject[checkoutRecord](ctx, l, localCheckout, checkoutID)
	if err != nil {
		return nil, err
	}
	if c.Status == "expired" {
		return nil, market.Errorf(market.CodeConflict, "This payment page has expired.")
	}
	piID := localID("pi", c.IdempotencyKey)
	if c.Status != "complete" && !succeed {
		return []Event{{
			ID: localID("evt", piID+":failed:"+strconv.FormatInt(now.UnixNano(), 10)), Type: EventPaymentFailed,
			StripeType: "payment_intent.payment_failed", Created: now.UTC(), ReservationID: c.ReservationID,
			PaymentIntentID: piID, AmountCents: c.Amount, Currency: market.Currency, FailureMessage: "Simulated decline (test mode).",
		}}, nil
	}
	// The payment is stored before the checkout says complete, so a crash
	// in between leaves an open checkout that pays again into the same
	// payment, never a complete one without its payment.
	group := market.TransferGroup(c.ReservationID)
	if c.TopUpID > 0 {
		group = "" // a balance top-up pays no reservation
	}
	p, err := createObject(ctx, l, localPayment, piID, c.IdempotencyKey, checkoutID, c.Amount, paymentRecord{
		CheckoutID: checkoutID, ReservationID: c.ReservationID, Amount: c.Amount, AmountReceived: c.Amount,
		Status: "succeeded", TransferGroup: group, ChargeID: localID("ch", c.IdempotencyKey),
	})
	if err != nil {
		return nil, err
	}
	if c.Status != "complete" {
		c.Status, c.PaymentIntentID = "complete", piID
		if err := updateObject(ctx, l, localCheckout, checkoutID, c); err != nil {
			return nil, err
		}
	}
	return []Event{
		{ID: localID("evt", checkoutID+":completed"), Type: EventCheckoutCompleted, StripeType: "checkout.session.completed",
			Created: now.UTC(), ReservationID: c.ReservationID, TopUpID: c.TopUpID, CheckoutID: checkoutID, PaymentIntentID: piID,
			AmountCents: c.Amount, Currency: market.Currency, PaymentStatus: "paid"},
		{ID: localID("evt", piID+":succeeded"), Type: EventPaymentSucceeded, StripeType: "payment_intent.succeeded",
			Created: now.UTC(), ReservationID: c.ReservationID, PaymentIntentID: piID, ChargeID: p.ChargeID, AmountCents: c.Amount,
			Currency: market.Currency},
	}, nil
}

// ExpireCheckout closes an unpaid simulated checkout, as Stripe does at its
// expiry time.
func (l *Local) ExpireCheckout(ctx context.Context, checkoutID string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, err := findObject[checkoutRecord](ctx, l, localCheckout, checkoutID)
	if err != nil {
		return err
	}
	if c.Status != "open" {
		return nil
	}
	c.Status = "expired"
	return updateObject(ctx, l, localCheckout, checkoutID, c)
}

// RetrievePayment returns a simulated payment.
func (l *Local) RetrievePayment(ctx context.Context, paymentIntentID string) (Payment, error) {
	p, err := findObject[paymentRecord](ctx, l, localPayment, paymentIntentID)
	if err != nil {
		return Payment{}, err
	}
	return p.payment(paymentIntentID), nil
}

// Refund records a simulated refund. A payment this processor has cannot be
// refunded beyond what was received; one it never stored (paid before it
// kept its objects) is taken on trust, since no money moves.
func (l *Local) Refund(ctx context.Context, paymentIntentID string, amount market.Cents, idempotencyKey string) (Refund, error) {
	if err := checkMutation("refund", amount, idempotencyKey); err != nil {
		return Refund{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	id := localID("re", idempotencyKey)
	same := func(r refundRecord) (Refund, error) {
		if r.PaymentIntentID != paymentIntentID || r.Amount != amount {
			return Refund{}, reusedKey(idempotencyKey)
		}
		return r.refund(id), nil
	}
	old, err := findObject[refundRecord](ctx, l, localRefund, id)
	switch {
	case err == nil:
		return same(old)
	case !isNotFound(err):
		return Refund{}, err
	}
	p, err := findObject[paymentRecord](ctx, l, localPayment, paymentIntentID)
	switch {
	case err == nil:
		refunded, err := l.store.SumLocalAmounts(ctx, localRefund, paymentIntentID)
		if err != nil {
			return Refund{}, fmt.Errorf("billing: local refunds of %s: store: %w", paymentIntentID, err)
		}
		if refunded+amount > p.AmountReceived {
			return Refund{}, market.Errorf(market.CodeInvalid, "Cannot refund %s: only %s of %s is left to refund.", amount, p.AmountReceived-refunded, p.AmountReceived)
		}
	case !isNotFound(err):
		return Refund{}, err
	}
	r, err := createObject(ctx, l, localRefund, id, idempotencyKey, paymentIntentID, amount,
		refundRecord{PaymentIntentID: paymentIntentID, Amount: amount, Status: "succeeded"})
	if err != nil {
		return Refund{}, err
	}
	return same(r)
}

// RetrieveRefund returns a simulated refund.
func (l *Local) RetrieveRefund(ctx context.Context, refundID string) (Refund, error) {
	r, err := findObject[refundRecord](ctx, l, localRefund, refundID)
	if err != nil {
		return Refund{}, err
	}
	return r.refund(refundID), nil
}

// Transfer records a simulated transfer.
func (l *Local) Transfer(ctx context.Context, connectedAccountID string, amount market.Cents, transferGroup, idempotencyKey string) (Transfer, error) {
	if err := checkMutation("transfer", amount, idempotencyKey); err != nil {
		return Transfer{}, err
	}
	if connectedAccountID == "" {
		return Transfer{}, fmt.Errorf("billing: transfer without a destination account")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	id := localID("tr", idempotencyKey)
	rec := transferRecord{AccountID: connectedAccountID, Amount: amount, TransferGroup: transferGroup}
	stored, err := createObject(ctx, l, localTransfer, id, idempotencyKey, connectedAccountID, amount, rec)
	if err != nil {
		return Transfer{}, err
	}
	if stored != rec {
		return Transfer{}, reusedKey(idempotencyKey)
	}
	return stored.transfer(id), nil
}

// RetrieveTransfer returns a simulated transfer.
func (l *Local) RetrieveTransfer(ctx context.Context, transferID string) (Transfer, error) {
	t, err := findObject[transferRecord](ctx, l, localTransfer, transferID)
	if err != nil {
		return Transfer{}, err
	}
	return t.transfer(transferID), nil
}

// CreateConnectedAccount records a simulated Express account, not yet
// onboarded.
func (l *Local) CreateConnectedAccount(ctx context.Context, email, idempotencyKey string) (Account, error) {
	if strings.TrimSpace(idempotencyKey) == "" {
		return Account{}, fmt.Errorf("billing: create account without an idempotency key")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	id := localID("acct", idempotencyKey)
	a, err := createObject(ctx, l, localAccount, id, idempotencyKey, "", 0, accountRecord{Email: email})
	if err != nil {
		return Account{}, err
	}
	if a.Email != email {
		return Account{}, reusedKey(idempotencyKey)
	}
	return a.account(id), nil
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
// Stripe would send. An account the processor never stored (created before
// it kept its objects) is stored now, from its id alone.
func (l *Local) CompleteOnboarding(accountID string, now time.Time) (Event, error) {
	if !strings.HasPrefix(accountID, "local_acct_") {
		return Event{}, localNotFound(localAccount, accountID)
	}
	ctx := context.Background()
	l.mu.Lock()
	defer l.mu.Unlock()
	a, err := findObject[accountRecord](ctx, l, localAccount, accountID)
	if isNotFound(err) {
		a, err = createObject(ctx, l, localAccount, accountID, "", "", 0, accountRecord{})
	}
	if err != nil {
		return Event{}, err
	}
	a.DetailsSubmitted, a.ChargesEnabled, a.PayoutsEnabled = true, true, true
	if err := updateObject(ctx, l, localAccount, accountID, a); err != nil {
		return Event{}, err
	}
	return Event{
		ID: localID("evt", accountID+":onboarded"), Type: EventAccountUpdated, StripeType: "account.updated", Created: now.UTC(),
		AccountID: accountID, DetailsSubmitted: true, ChargesEnabled: true, PayoutsEnabled: true,
	}, nil
}

// RetrieveAccount returns a simulated account. One the processor never
// stored (created before it kept its objects) reads as not onboarded.
func (l *Local) RetrieveAccount(ctx context.Context, accountID string) (Account, error) {
	if !strings.HasPrefix(accountID, "local_acct_") {
		return Account{}, localNotFound(localAccount, accountID)
	}
	a, err := findObject[accountRecord](ctx, l, localAccount, accountID)
	switch {
	case isNotFound(err):
		return Account{ID: accountID}, nil
	case err != nil:
		return Account{}, err
	}
	return a.account(accountID), nil
}

// LocalTestCard is a card the local processor's setup page offers: no real
// card is ever entered in test mode.
type LocalTestCard struct {
	Number   string // as printed, e.g. "4242 4242 4242 4242"
	Brand    string // "visa", "mastercard"
	Last4    string
	Declines bool   // every charge of it is declined, to try the decline path
	Outcome  string // what charging it does, in words
}

// LocalTestCards are the cards the local setup page offers, the same
// numbers Stripe's test mode uses for the same outcomes.
func LocalTestCards() []LocalTestCard {
	return []LocalTestCard{
		{Number: "4242 4242 4242 4242", Brand: "visa", Last4: "4242", Outcome: "charges succeed"},
		{Number: "5555 5555 5555 4444", Brand: "mastercard", Last4: "4444", Outcome: "charges succeed"},
		{Number: "4000 0000 0000 0002", Brand: "visa", Last4: "0002", Declines: true, Outcome: "charges are declined"},
	}
}

// CreateSetupCheckout records a simulated setup checkout whose URL is
// SetupPath + id. The buyer's customer is derived from the user id when
// the buyer has none yet, so it is the same however often it is created.
func (l *Local) CreateSetupCheckout(ctx context.Context, in SetupInput) (Checkout, error) {
	if in.UserID <= 0 || in.SuccessURL == "" || in.CancelURL == "" {
		return Checkout{}, fmt.Errorf("billing: setup checkout needs a user and return URLs")
	}
	customer := in.Customer
	if customer == "" {
		customer = localID("cus", CustomerKey(in.UserID))
	}
	var nonce [16]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return Checkout{}, fmt.Errorf("billing: local setup: %w", err)
	}
	key := "setup_" + hex.EncodeToString(nonce[:])
	id := localID("cs_setup", key)
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := createObject(ctx, l, localSetup, id, key, customer, 0, setupRecord{UserID: in.UserID, Customer: customer,
		BuyerEmail: in.BuyerEmail, SuccessURL: in.SuccessURL, CancelURL: in.CancelURL, Status: "open"}); err != nil {
		return Checkout{}, err
	}
	return Checkout{ID: id, URL: l.cfg.SetupPath + url.PathEscape(id), Status: "open"}, nil
}

// SetupInput returns what a simulated setup checkout was created with, for
// the simulated page to check whose it is and where to return.
func (l *Local) SetupInput(checkoutID string) (SetupInput, error) {
	st, err := findObject[setupRecord](context.Background(), l, localSetup, checkoutID)
	if err != nil {
		return SetupInput{}, err
	}
	return SetupInput{UserID: st.UserID, Customer: st.Customer, BuyerEmail: st.BuyerEmail, SuccessURL: st.SuccessURL, CancelURL: st.CancelURL}, nil
}

// CompleteSetup is the buyer choosing one of LocalTestCards (by its number)
// on the simulated page: the card is saved to the buyer's customer.
// Completing a completed setup again returns the card saved the first
// time.
func (l *Local) CompleteSetup(checkoutID, cardNumber string) (SavedMethod, error) {
	ctx := context.Background()
	var card LocalTestCard
	for _, c := range LocalTestCards() {
		if strings.ReplaceAll(c.Number, " ", "") == strings.ReplaceAll(cardNumber, " ", "") {
			card = c
		}
	}
	if card.Number == "" {
		return SavedMethod{}, market.Errorf(market.CodeInvalid, "Choose one of the test cards listed.")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	st, err := findObject[setupRecord](ctx, l, localSetup, checkoutID)
	if err != nil {
		return SavedMethod{}, err
	}
	if st.Status == "complete" {
		return l.savedMethod(ctx, checkoutID, st)
	}
	pmID := localID("pm", checkoutID)
	if _, err := createObject(ctx, l, localMethod, pmID, checkoutID, st.Customer, 0, methodRecord{UserID: st.UserID,
		Customer: st.Customer, Brand: card.Brand, Last4: card.Last4, Declines: card.Declines}); err != nil {
		return SavedMethod{}, err
	}
	st.Status, st.PaymentMethodID = "complete", pmID
	if err := updateObject(ctx, l, localSetup, checkoutID, st); err != nil {
		return SavedMethod{}, err
	}
	return l.savedMethod(ctx, checkoutID, st)
}

// RetrieveSetup returns the card a completed simulated setup saved.
func (l *Local) RetrieveSetup(ctx context.Context, checkoutID string) (SavedMethod, error) {
	st, err := findObject[setupRecord](ctx, l, localSetup, checkoutID)
	if err != nil {
		return SavedMethod{}, err
	}
	if st.Status != "complete" {
		return SavedMethod{}, errSetupIncomplete
	}
	return l.savedMethod(ctx, checkoutID, st)
}

func (l *Local) savedMethod(ctx context.Context, checkoutID string, st setupRecord) (SavedMethod, error) {
	m, err := findObject[methodRecord](ctx, l, localMethod, st.PaymentMethodID)
	if err != nil {
		return SavedMethod{}, err
	}
	return SavedMethod{CheckoutID: checkoutID, UserID: st.UserID, Customer: m.Customer, PaymentMethodID: st.PaymentMethodID,
		Brand: m.Brand, Last4: m.Last4, Label: market.PaymentMethodLabel(m.Brand, m.Last4)}, nil
}

// ChargeSaved charges a saved test card: a card that declines leaves a
// failed payment and returns a *Decline, any other succeeds at once. The
// payment's id derives from the idempotency key, so a retried call returns
// the first outcome, succeeded or declined, and charges once.
func (l *Local) ChargeSaved(ctx context.Context, in ChargeInput) (Payment, error) {
	if err := checkMutation("charge", in.Amount, in.IdempotencyKey); err != nil {
		return Payment{}, err
	}
	if in.Customer == "" || in.PaymentMethodID == "" {
		return Payment{}, fmt.Errorf("billing: charge of a saved card needs its customer and payment method")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	m, err := findObject[methodRecord](ctx, l, localMethod, in.PaymentMethodID)
	if err != nil {
		return Payment{}, err
	}
	if m.Customer != in.Customer {
		return Payment{}, market.Errorf(market.CodeInvalid, "That saved card belongs to another customer.")
	}
	id := localID("pi", in.IdempotencyKey)
	rec := paymentRecord{ReservationID: in.ReservationID, Amount: in.Amount, PaymentMethodID: in.PaymentMethodID, Customer: in.Customer,
		Metadata: in.Metadata}
	if in.ReservationID > 0 {
		rec.TransferGroup = market.TransferGroup(in.ReservationID)
	}
	switch {
	case m.Declines:
		rec.Status, rec.DeclineCode = "requires_payment_method", "generic_decline"
	case in.Authorize:
		rec.Status, rec.ChargeID = "requires_capture", localID("ch", in.IdempotencyKey)
	default:
		rec.Status, rec.AmountReceived, rec.ChargeID = "succeeded", in.Amount, localID("ch", in.IdempotencyKey)
	}
	stored, err := createObject(ctx, l, localPayment, id, in.IdempotencyKey, in.PaymentMethodID, in.Amount, rec)
	if err != nil {
		return Payment{}, err
	}
	if stored.ReservationID != rec.ReservationID || stored.Amount != rec.Amount || stored.PaymentMethodID != rec.PaymentMethodID {
		return Payment{}, reusedKey(in.IdempotencyKey)
	}
	if stored.Status == "requires_payment_method" {
		return Payment{}, &Decline{PaymentIntentID: id, Code: "card_declined", DeclineCode: stored.DeclineCode,
			Err: errors.New("simulated decline (test card " + m.Last4 + ")")}
	}
	return stored.payment(id), nil
}

// Capture captures amount of a simulated authorised payment (at most what
// was authorised); capturing it again answers with the captured payment.
func (l *Local) Capture(ctx context.Context, in CaptureInput) (Payment, error) {
	paymentIntentID, amount, idempotencyKey := in.PaymentIntentID, in.Amount, in.IdempotencyKey
	if err := checkMutation("capture", amount, idempotencyKey); err != nil {
		return Payment{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p, err := findObject[paymentRecord](ctx, l, localPayment, paymentIntentID)
	if err != nil {
		return Payment{}, err
	}
	switch {
	case p.Status == "succeeded" && p.CaptureKey == idempotencyKey:
		return p.payment(paymentIntentID), nil
	case p.Status != "requires_capture":
		return Payment{}, market.Errorf(market.CodeConflict, "This payment is %s, not waiting to be captured.", p.Status)
	case amount > p.Amount:
		return Payment{}, market.Errorf(market.CodeInvalid, "Cannot capture %s of an authorisation of %s.", amount, p.Amount)
	}
	p.Status, p.AmountReceived, p.CaptureKey = "succeeded", amount, idempotencyKey
	if p.Metadata == nil {
		p.Metadata = map[string]string{}
	}
	for k, v := range in.Metadata {
		p.Metadata[k] = v
	}
	if in.ReservationID > 0 {
		p.ReservationID, p.TransferGroup = in.ReservationID, market.TransferGroup(in.ReservationID)
		p.Metadata[market.MetadataReservationID] = strconv.FormatInt(in.ReservationID, 10)
	}
	if err := updateObject(ctx, l, localPayment, paymentIntentID, p); err != nil {
		return Payment{}, err
	}
	return p.payment(paymentIntentID), nil
}

// ReleaseAuthorization cancels a simulated authorised payment.
func (l *Local) ReleaseAuthorization(ctx context.Context, paymentIntentID string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, err := findObject[paymentRecord](ctx, l, localPayment, paymentIntentID)
	if err != nil {
		return err
	}
	switch p.Status {
	case "canceled":
		return nil
	case "requires_capture":
		p.Status = "canceled"
		return updateObject(ctx, l, localPayment, paymentIntentID, p)
	}
	return market.Errorf(market.CodeConflict, "This payment is %s, not an authorisation.", p.Status)
}

// ListPayments returns every simulated payment (since is ignored: the
// local processor keeps no creation times, and holds only this
// marketplace's objects).
func (l *Local) ListPayments(ctx context.Context, since time.Time) ([]Payment, error) {
	return listObjects(ctx, l, localPayment, paymentRecord.payment)
}

// ListRefunds returns every simulated refund.
func (l *Local) ListRefunds(ctx context.Context, since time.Time) ([]Refund, error) {
	return listObjects(ctx, l, localRefund, refundRecord.refund)
}

// ListTransfers returns every simulated transfer.
func (l *Local) ListTransfers(ctx context.Context, since time.Time) ([]Transfer, error) {
	return listObjects(ctx, l, localTransfer, transferRecord.transfer)
}

// listObjects decodes every stored object of kind into its public form.
func listObjects[R, T any](ctx context.Context, l *Local, kind string, public func(R, string) T) ([]T, error) {
	ids, data, err := l.store.ListLocalObjects(ctx, kind)
	if err != nil {
		return nil, fmt.Errorf("billing: list local %s: %w", kind, err)
	}
	out := make([]T, 0, len(ids))
	for i, id := range ids {
		var rec R
		if err := json.Unmarshal(data[i], &rec); err != nil {
			return nil, fmt.Errorf("billing: local %s %s: decode: %w", kind, id, err)
		}
		out = append(out, public(rec, id))
	}
	return out, nil
}

// ErrLocalWebhook is what ParseWebhook of the local processor returns for
// every webhook.
var ErrLocalWebhook = &market.Error{Code: market.CodeInvalid,
	Message: "This marketplace runs the local test processor and accepts no webhook events: simulated payments and onboarding are applied by the marketplace itself."}

// ParseWebhook refuses every webhook (ErrLocalWebhook), however it is
// signed. The local processor's events come from CompleteCheckout and
// CompleteOnboarding inside the process; any key that could sign one here
// would be a key anyone could read in this source.
func (l *Local) ParseWebhook(payload []byte, signatureHeader string) (Event, error) {
	return Event{}, ErrLocalWebhook
}

// Compile-time checks that both processors implement Processor.
var (
	_ Processor = (*Stripe)(nil)
	_ Processor = (*Local)(nil)
)

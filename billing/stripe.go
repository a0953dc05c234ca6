package billing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/gpumarket/gpumarket/market"
)

// StripeConfig configures the Stripe processor.
type StripeConfig struct {
	SecretKey     string // sk_live_… or sk_test_…
	WebhookSecret string // whsec_…, the webhook endpoint's signing secret
	// APIBase overrides Stripe's API URL, e.g. "http://127.0.0.1:12111"
	// for stripe-mock. Empty means api.stripe.com.
	APIBase string
	// HTTPClient makes the calls; nil means a client with a 30 s timeout.
	HTTPClient *http.Client
	// MaxNetworkRetries is how often stripe-go itself retries a failed
	// call (with the same idempotency key). Zero means never: the caller's
	// settlement retrier retries instead, and a failure surfaces at once.
	MaxNetworkRetries int64
}

// Stripe is the Stripe processor. It uses its own stripe-go client and
// backend, never the package-level stripe.Key.
type Stripe struct {
	api           *client.API
	webhookSecret string
}

// NewStripe returns a Stripe processor.
func NewStripe(cfg StripeConfig) (*Stripe, error) {
	if cfg.SecretKey == "" {
		return nil, errors.New("billing: stripe needs a secret key")
	}
	if cfg.WebhookSecret == "" {
		return nil, errors.New("billing: stripe needs a webhook signing secret")
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	bc := &stripe.BackendConfig{
		HTTPClient:        hc,
		MaxNetworkRetries: stripe.Int64(cfg.MaxNetworkRetries),
		// Errors are returned and logged by the caller with context.
		LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
	}
	if cfg.APIBase != "" {
		bc.URL = stripe.String(cfg.APIBase)
	}
	backend := stripe.GetBackendWithConfig(stripe.APIBackend, bc)
	api := client.New(cfg.SecretKey, &stripe.Backends{API: backend, Connect: backend, Uploads: backend})
	return &Stripe{api: api, webhookSecret: cfg.WebhookSecret}, nil
}

// Simulated is false: Stripe moves real money (or test money with a test key).
func (s *Stripe) Simulated() bool { return false }

// CreateCheckout creates a Checkout Session in payment mode with one inline
// price for the reservation amount. The reservation id is in the session's
// and the payment intent's metadata and in the client reference, and the
// payment intent's transfer group is "res_<id>", so transfers can follow it.
func (s *Stripe) CreateCheckout(ctx context.Context, in CheckoutInput) (Checkout, error) {
	if err := checkMutation("charge", in.Amount, in.IdempotencyKey); err != nil {
		return Checkout{}, err
	}
	if (in.ReservationID <= 0 && in.TopUpID <= 0) || in.SuccessURL == "" || in.CancelURL == "" {
		return Checkout{}, fmt.Errorf("billing: checkout needs a reservation or a top-up, and return URLs")
	}
	rid := strconv.FormatInt(in.ReservationID, 10)
	desc := in.Description
	if desc == "" {
		desc = "Reservation #" + rid
	}
	meta := map[string]string{MetadataReservationID: rid}
	ref, group := rid, stripe.String(market.TransferGroup(in.ReservationID))
	if in.TopUpID > 0 {
		// A balance top-up: no reservation, no transfer group.
		tid := strconv.FormatInt(in.TopUpID, 10)
		meta, ref, group = map[string]string{MetadataTopUpID: tid}, "topup_"+tid, nil
		if in.Description == "" {
			desc = "Balance top-up #" + tid
		}
	}
	p := &stripe.CheckoutSessionParams{
		Mode:              stripe.String(string(stripe.CheckoutSessionModePayment)),
		ClientReferenceID: stripe.String(ref),
		SuccessURL:        stripe.String(in.SuccessURL),
		CancelURL:         stripe.String(in.CancelURL),
		Metadata:          meta,
		LineItems: []*stripe.CheckoutSessionLineItemParams{{
			Quantity: stripe.Int64(1),
			PriceData: &stripe.CheckoutSessionLineItemPriceDataParams{
				Currency:    stripe.String(market.Currency),
				UnitAmount:  stripe.Int64(int64(in.Amount)),
				ProductData: &stripe.CheckoutSessionLineItemPriceDataProductDataParams{Name: stripe.String(desc)},
			},
		}},
		PaymentIntentData: &stripe.CheckoutSessionPaymentIntentDataParams{
			Metadata:      meta,
			TransferGroup: group,
			Description:   stripe.String(desc),
		},
	}
	if in.BuyerEmail != "" {
		p.CustomerEmail = stripe.String(in.BuyerEmail)
	}
	if !in.ExpiresAt.IsZero() {
		p.ExpiresAt = stripe.Int64(in.ExpiresAt.Unix())
	}
	p.Context = ctx
	p.SetIdempotencyKey(in.IdempotencyKey)
	cs, err := s.api.CheckoutSessions.New(p)
	if err != nil {
		return Checkout{}, wrap("create checkout for reservation "+rid, err)
	}
	return checkoutFrom(cs), nil
}

// RetrieveCheckout returns a Checkout Session's state.
func (s *Stripe) RetrieveCheckout(ctx context.Context, checkoutID string) (Checkout, error) {
	p := &stripe.CheckoutSessionParams{}
	p.Context = ctx
	cs, err := s.api.CheckoutSessions.Get(checkoutID, p)
	if err != nil {
		return Checkout{}, wrap("retrieve checkout "+checkoutID, err)
	}
	return checkoutFrom(cs), nil
}

// ExpireCheckout expires an open Checkout Session, so the buyer can no
// longer pay it. Stripe refuses to expire a session that is not open
// (complete or already expired); that is no error here.
func (s *Stripe) ExpireCheckout(ctx context.Context, checkoutID string) error {
	p := &stripe.CheckoutSessionExpireParams{}
	p.Context = ctx
	p.SetIdempotencyKey(checkoutID + "_expire")
	if _, err := s.api.CheckoutSessions.Expire(checkoutID, p); err != nil {
		if co, gerr := s.RetrieveCheckout(ctx, checkoutID); gerr == nil && co.Status != string(stripe.CheckoutSessionStatusOpen) {
			return nil
		}
		return wrap("expire checkout "+checkoutID, err)
	}
	return nil
}

func checkoutFrom(cs *stripe.CheckoutSession) Checkout {
	c := Checkout{
		ID: cs.ID, URL: cs.URL, Amount: market.Cents(cs.AmountTotal), Status: string(cs.Status),
		Paid:          cs.PaymentStatus == stripe.CheckoutSessionPaymentStatusPaid,
		ReservationID: reservationIDFrom(cs.Metadata, cs.ClientReferenceID, ""),
	}
	if cs.PaymentIntent != nil {
		c.PaymentIntentID = cs.PaymentIntent.ID
	}
	return c
}

// RetrievePayment returns a PaymentIntent's state.
func (s *Stripe) RetrievePayment(ctx context.Context, paymentIntentID string) (Payment, error) {
	p := &stripe.PaymentIntentParams{}
	p.Context = ctx
	pi, err := s.api.PaymentIntents.Get(paymentIntentID, p)
	if err != nil {
		return Payment{}, wrap("retrieve payment "+paymentIntentID, err)
	}
	return paymentFrom(pi), nil
}

func paymentFrom(pi *stripe.PaymentIntent) Payment {
	pay := Payment{
		ID: pi.ID, Amount: market.Cents(pi.Amount), AmountReceived: market.Cents(pi.AmountReceived),
		Status: string(pi.Status), Succeeded: pi.Status == stripe.PaymentIntentStatusSucceeded,
		TransferGroup: pi.TransferGroup, ReservationID: reservationIDFrom(pi.Metadata, "", pi.TransferGroup),
		Metadata: pi.Metadata,
	}
	if pi.LatestCharge != nil {
		pay.ChargeID = pi.LatestCharge.ID
	}
	return pay
}

// CreateSetupCheckout creates a Checkout Session in setup mode for the
// buyer's customer, created first (idempotently, per user) when the buyer
// has none. The session's id comes back to SuccessURL as "setup".
func (s *Stripe) CreateSetupCheckout(ctx context.Context, in SetupInput) (Checkout, error) {
	if in.UserID <= 0 || in.SuccessURL == "" || in.CancelURL == "" {
		return Checkout{}, fmt.Errorf("billing: setup checkout needs a user and return URLs")
	}
	uid := strconv.FormatInt(in.UserID, 10)
	customer := in.Customer
	if customer == "" {
		cp := &stripe.CustomerParams{Metadata: map[string]string{MetadataUserID: uid}}
		if in.BuyerEmail != "" {
			cp.Email = stripe.String(in.BuyerEmail)
		}
		cp.Context = ctx
		cp.SetIdempotencyKey(CustomerKey(in.UserID))
		c, err := s.api.Customers.New(cp)
		if err != nil {
			return Checkout{}, wrap("create customer for user "+uid, err)
		}
		customer = c.ID
	}
	meta := map[string]string{MetadataUserID: uid}
	p := &stripe.CheckoutSessionParams{
		Mode:               stripe.String(string(stripe.CheckoutSessionModeSetup)),
		Customer:           stripe.String(customer),
		PaymentMethodTypes: stripe.StringSlice([]string{"card"}),
		SuccessURL:         stripe.String(withQuery(in.SuccessURL, "setup={CHECKOUT_SESSION_ID}")),
		CancelURL:          stripe.String(in.CancelURL),
		Metadata:           meta,
		SetupIntentData:    &stripe.CheckoutSessionSetupIntentDataParams{Metadata: meta},
	}
	p.Context = ctx
	cs, err := s.api.CheckoutSessions.New(p)
	if err != nil {
		return Checkout{}, wrap("create setup checkout for user "+uid, err)
	}
	return checkoutFrom(cs), nil
}

// RetrieveSetup reads a completed setup Checkout Session with its
// SetupIntent's payment method, for the card's brand and last digits.
func (s *Stripe) RetrieveSetup(ctx context.Context, checkoutID string) (SavedMethod, error) {
	p := &stripe.CheckoutSessionParams{}
	p.AddExpand("setup_intent.payment_method")
	p.Context = ctx
	cs, err := s.api.CheckoutSessions.Get(checkoutID, p)
	if err != nil {
		return SavedMethod{}, wrap("retrieve setup checkout "+checkoutID, err)
	}
	if cs.Mode != stripe.CheckoutSessionModeSetup || cs.Status != stripe.CheckoutSessionStatusComplete || cs.SetupIntent == nil ||
		cs.SetupIntent.PaymentMethod == nil || cs.Customer == nil {
		return SavedMethod{}, errSetupIncomplete
	}
	pm := cs.SetupIntent.PaymentMethod
	sm := SavedMethod{CheckoutID: cs.ID, Customer: cs.Customer.ID, PaymentMethodID: pm.ID}
	sm.UserID, _ = strconv.ParseInt(cs.Metadata[MetadataUserID], 10, 64)
	if pm.Card != nil {
		sm.Brand, sm.Last4 = string(pm.Card.Brand), pm.Card.Last4
	}
	sm.Label = market.PaymentMethodLabel(sm.Brand, sm.Last4)
	return sm, nil
}

// ChargeSaved creates and confirms a PaymentIntent off-session on the
// customer's saved card. A card error (declined, or authentication
// required) is a *Decline carrying the failed intent.
func (s *Stripe) ChargeSaved(ctx context.Context, in ChargeInput) (Payment, error) {
	if err := checkMutation("charge", in.Amount, in.IdempotencyKey); err != nil {
		return Payment{}, err
	}
	if in.Customer == "" || in.PaymentMethodID == "" {
		return Payment{}, fmt.Errorf("billing: charge of a saved card needs its customer and payment method")
	}
	p := &stripe.PaymentIntentParams{
		Amount: stripe.Int64(int64(in.Amount)), Currency: stripe.String(market.Currency),
		Customer: stripe.String(in.Customer), PaymentMethod: stripe.String(in.PaymentMethodID),
		PaymentMethodTypes: stripe.StringSlice([]string{"card"}),
		OffSession:         stripe.Bool(true), Confirm: stripe.Bool(true),
	}
	if in.Authorize {
		p.CaptureMethod = stripe.String(string(stripe.PaymentIntentCaptureMethodManual))
	}
	if in.Description != "" {
		p.Description = stripe.String(in.Description)
	}
	p.Metadata = map[string]string{}
	for k, v := range in.Metadata {
		p.Metadata[k] = v
	}
	if in.ReservationID > 0 {
		p.Metadata[MetadataReservationID] = strconv.FormatInt(in.ReservationID, 10)
		p.TransferGroup = stripe.String(market.TransferGroup(in.ReservationID))
	}
	p.Context = ctx
	p.SetIdempotencyKey(in.IdempotencyKey)
	pi, err := s.api.PaymentIntents.New(p)
	if err != nil {
		var se *stripe.Error
		if errors.As(err, &se) && se.Type == stripe.ErrorTypeCard {
			d := &Decline{Code: string(se.Code), DeclineCode: string(se.DeclineCode), Err: err}
			if se.PaymentIntent != nil {
				d.PaymentIntentID = se.PaymentIntent.ID
			}
			return Payment{}, d
		}
		return Payment{}, wrap(fmt.Sprintf("charge %d to saved card %s", in.Amount, in.PaymentMethodID), err)
	}
	return paymentFrom(pi), nil
}

// Capture captures amount of an authorised PaymentIntent; Stripe releases
// the rest of the authorisation.
func (s *Stripe) Capture(ctx context.Context, in CaptureInput) (Payment, error) {
	if err := checkMutation("capture", in.Amount, in.IdempotencyKey); err != nil {
		return Payment{}, err
	}
	if in.PaymentIntentID == "" {
		return Payment{}, fmt.Errorf("billing: capture needs the authorised payment")
	}
	// What the payment is for goes on it first (setting the same values
	// again on a retry changes nothing), then the capture, under its key.
	up := &stripe.PaymentIntentParams{Metadata: map[string]string{}}
	for k, v := range in.Metadata {
		up.Metadata[k] = v
	}
	if in.ReservationID > 0 {
		up.Metadata[MetadataReservationID] = strconv.FormatInt(in.ReservationID, 10)
		up.TransferGroup = stripe.String(market.TransferGroup(in.ReservationID))
	}
	up.Context = ctx
	if _, err := s.api.PaymentIntents.Update(in.PaymentIntentID, up); err != nil {
		return Payment{}, wrap("name the payment "+in.PaymentIntentID+" before its capture", err)
	}
	p := &stripe.PaymentIntentCaptureParams{AmountToCapture: stripe.Int64(int64(in.Amount))}
	p.Context = ctx
	p.SetIdempotencyKey(in.IdempotencyKey)
	pi, err := s.api.PaymentIntents.Capture(in.PaymentIntentID, p)
	if err != nil {
		return Payment{}, wrap(fmt.Sprintf("capture %d of %s", in.Amount, in.PaymentIntentID), err)
	}
	return paymentFrom(pi), nil
}

// ReleaseAuthorization cancels an authorised PaymentIntent; one already
// canceled is left as it is.
func (s *Stripe) ReleaseAuthorization(ctx context.Context, paymentIntentID string) error {
	p := &stripe.PaymentIntentCancelParams{}
	p.Context = ctx
	_, err := s.api.PaymentIntents.Cancel(paymentIntentID, p)
	var se *stripe.Error
	if errors.As(err, &se) && se.Code == stripe.ErrorCodePaymentIntentUnexpectedState {
		if pi, rerr := s.RetrievePayment(ctx, paymentIntentID); rerr == nil && pi.Status == string(stripe.PaymentIntentStatusCanceled) {
			return nil
		}
	}
	if err != nil {
		return wrap("release authorization "+paymentIntentID, err)
	}
	return nil
}

// Refund makes a (partial) refund of a PaymentIntent.
func (s *Stripe) Refund(ctx context.Context, paymentIntentID string, amount market.Cents, idempotencyKey string) (Refund, error) {
	if err := checkMutation("refund", amount, idempotencyKey); err != nil {
		return Refund{}, err
	}
	p := &stripe.RefundParams{PaymentIntent: stripe.String(paymentIntentID), Amount: stripe.Int64(int64(amount))}
	p.Context = ctx
	p.SetIdempotencyKey(idempotencyKey)
	r, err := s.api.Refunds.New(p)
	if err != nil {
		return Refund{}, wrap(fmt.Sprintf("refund %d of %s", amount, paymentIntentID), err)
	}
	return refundFrom(r), nil
}

// RetrieveRefund returns a refund.
func (s *Stripe) RetrieveRefund(ctx context.Context, refundID string) (Refund, error) {
	p := &stripe.RefundParams{}
	p.Context = ctx
	r, err := s.api.Refunds.Get(refundID, p)
	if err != nil {
		return Refund{}, wrap("retrieve refund "+refundID, err)
	}
	return refundFrom(r), nil
}

func refundFrom(r *stripe.Refund) Refund {
	out := Refund{ID: r.ID, Amount: market.Cents(r.Amount), Status: string(r.Status)}
	if r.PaymentIntent != nil {
		out.PaymentIntentID = r.PaymentIntent.ID
	}
	return out
}

// Transfer sends amount from the platform's balance to a connected account.
func (s *Stripe) Transfer(ctx context.Context, connectedAccountID string, amount market.Cents, transferGroup, idempotencyKey string) (Transfer, error) {
	if err := checkMutation("transfer", amount, idempotencyKey); err != nil {
		return Transfer{}, err
	}
	p := &stripe.TransferParams{
		Amount: stripe.Int64(int64(amount)), Currency: stripe.String(market.Currency),
		Destination: stripe.String(connectedAccountID),
	}
	if transferGroup != "" {
		p.TransferGroup = stripe.String(transferGroup)
	}
	p.Context = ctx
	p.SetIdempotencyKey(idempotencyKey)
	t, err := s.api.Transfers.New(p)
	if err != nil {
		return Transfer{}, wrap(fmt.Sprintf("transfer %d to %s", amount, connectedAccountID), err)
	}
	return transferFrom(t), nil
}

// RetrieveTransfer returns a transfer.
func (s *Stripe) RetrieveTransfer(ctx context.Context, transferID string) (Transfer, error) {
	p := &stripe.TransferParams{}
	p.Context = ctx
	t, err := s.api.Transfers.Get(transferID, p)
	if err != nil {
		return Transfer{}, wrap("retrieve transfer "+transferID, err)
	}
	return transferFrom(t), nil
}

func transferFrom(t *stripe.Transfer) Transfer {
	out := Transfer{ID: t.ID, Amount: market.Cents(t.Amount), TransferGroup: t.TransferGroup}
	if t.Destination != nil {
		out.AccountID = t.Destination.ID
	}
	return out
}

// ListPayments lists the account's payment intents created at or after
// since, every page of them.
func (s *Stripe) ListPayments(ctx context.Context, since time.Time) ([]Payment, error) {
	p := &stripe.PaymentIntentListParams{}
	p.Context = ctx
	p.Limit = stripe.Int64(100)
	if !since.IsZero() {
		p.CreatedRange = &stripe.RangeQueryParams{GreaterThanOrEqual: since.Unix()}
	}
	var out []Payment
	it := s.api.PaymentIntents.List(p)
	for it.Next() {
		out = append(out, paymentFrom(it.PaymentIntent()))
	}
	if err := it.Err(); err != nil {
		return nil, wrap("list payments", err)
	}
	return out, nil
}

// ListRefunds lists the account's refunds created at or after since.
func (s *Stripe) ListRefunds(ctx context.Context, since time.Time) ([]Refund, error) {
	p := &stripe.RefundListParams{}
	p.Context = ctx
	p.Limit = stripe.Int64(100)
	if !since.IsZero() {
		p.CreatedRange = &stripe.RangeQueryParams{GreaterThanOrEqual: since.Unix()}
	}
	var out []Refund
	it := s.api.Refunds.List(p)
	for it.Next() {
		out = append(out, refundFrom(it.Refund()))
	}
	if err := it.Err(); err != nil {
		return nil, wrap("list refunds", err)
	}
	return out, nil
}

// ListTransfers lists the platform's transfers created at or after since.
func (s *Stripe) ListTransfers(ctx context.Context, since time.Time) ([]Transfer, error) {
	p := &stripe.TransferListParams{}
	p.Context = ctx
	p.Limit = stripe.Int64(100)
	if !since.IsZero() {
		p.CreatedRange = &stripe.RangeQueryParams{GreaterThanOrEqual: since.Unix()}
	}
	var out []Transfer
	it := s.api.Transfers.List(p)
	for it.Next() {
		out = append(out, transferFrom(it.Transfer()))
	}
	if err := it.Err(); err != nil {
		return nil, wrap("list transfers", err)
	}
	return out, nil
}

// CreateConnectedAccount creates an Express account requesting the
// transfers capability (the platform charges; providers only receive).
func (s *Stripe) CreateConnectedAccount(ctx context.Context, email, idempotencyKey string) (Account, error) {
	if idempotencyKey == "" {
		return Account{}, errors.New("billing: create account without an idempotency key")
	}
	p := &stripe.AccountParams{
		Type: stripe.String(string(stripe.AccountTypeExpress)),
		Capabilities: &stripe.AccountCapabilitiesParams{
			Transfers: &stripe.AccountCapabilitiesTransfersParams{Requested: stripe.Bool(true)},
		},
	}
	if email != "" {
		p.Email = stripe.String(email)
	}
	p.Context = ctx
	p.SetIdempotencyKey(idempotencyKey)
	a, err := s.api.Accounts.New(p)
	if err != nil {
		return Account{}, wrap("create connected account", err)
	}
	return accountFrom(a), nil
}

// AccountLink creates an account_onboarding link.
func (s *Stripe) AccountLink(ctx context.Context, accountID, refreshURL, returnURL string) (string, error) {
	p := &stripe.AccountLinkParams{
		Account: stripe.String(accountID), RefreshURL: stripe.String(refreshURL), ReturnURL: stripe.String(returnURL),
		Type: stripe.String(string(stripe.AccountLinkTypeAccountOnboarding)),
	}
	p.Context = ctx
	l, err := s.api.AccountLinks.New(p)
	if err != nil {
		return "", wrap("create account link for "+accountID, err)
	}
	return l.URL, nil
}

// RetrieveAccount returns a connected account's onboarding state.
func (s *Stripe) RetrieveAccount(ctx context.Context, accountID string) (Account, error) {
	p := &stripe.AccountParams{}
	p.Context = ctx
	a, err := s.api.Accounts.GetByID(accountID, p)
	if err != nil {
		return Account{}, wrap("retrieve account "+accountID, err)
	}
	return accountFrom(a), nil
}

func accountFrom(a *stripe.Account) Account {
	return Account{ID: a.ID, Email: a.Email, DetailsSubmitted: a.DetailsSubmitted, ChargesEnabled: a.ChargesEnabled, PayoutsEnabled: a.PayoutsEnabled}
}

// ParseWebhook verifies the Stripe-Signature header with the endpoint
// secret and maps the event; see Processor.
func (s *Stripe) ParseWebhook(payload []byte, signatureHeader string) (Event, error) {
	return parseWebhook(payload, signatureHeader, s.webhookSecret)
}

// wrap turns a stripe-go error into an *Error, classifying it as retryable
// or not.
func wrap(op string, err error) error {
	be := &Error{Op: op, Err: err}
	var se *stripe.Error
	if errors.As(err, &se) {
		be.Status, be.Code, be.RequestID = se.HTTPStatusCode, string(se.Code), se.RequestID
		be.Retryable = retryableStatus(se.HTTPStatusCode) || se.Code == stripe.ErrorCodeLockTimeout
	} else {
		// No response: a timeout, a refused or reset connection. The call
		// may or may not have reached Stripe; retrying with the same
		// idempotency key is the safe way to find out.
		be.Retryable = true
	}
	return be
}

package billing

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/gpumarket/gpumarket/market"
)

// recorded is one request the Stripe client sent.
type recorded struct {
	Method, Path, IdempotencyKey string
	Form                         url.Values
}

// recorder is an http.RoundTripper that keeps every request it forwards.
type recorder struct {
	mu   sync.Mutex
	reqs []recorded
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	form, _ := url.ParseQuery(string(body))
	if req.Method == http.MethodGet {
		form = req.URL.Query()
	}
	r.mu.Lock()
	r.reqs = append(r.reqs, recorded{req.Method, req.URL.Path, req.Header.Get("Idempotency-Key"), form})
	r.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

func (r *recorder) last(t *testing.T) recorded {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reqs) == 0 {
		t.Fatal("no request sent")
	}
	return r.reqs[len(r.reqs)-1]
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reqs)
}

func newMockStripe(t *testing.T) (*Stripe, *recorder) {
	t.Helper()
	rec := &recorder{}
	s, err := NewStripe(StripeConfig{
		SecretKey: "sk_test_123", WebhookSecret: "whsec_test", APIBase: stripeMockURL(t),
		HTTPClient: &http.Client{Transport: rec, Timeout: 10 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, rec
}

// wantForm checks a request's method, path, idempotency key ("*": any, as
// stripe-go makes one up for POSTs without) and form fields.
func wantForm(t *testing.T, got recorded, method, path, key string, fields map[string]string) {
	t.Helper()
	keyOK := got.IdempotencyKey == key || key == "*" && got.IdempotencyKey != ""
	if got.Method != method || got.Path != path || !keyOK {
		t.Errorf("request %s %s key %q, want %s %s key %q", got.Method, got.Path, got.IdempotencyKey, method, path, key)
	}
	for k, v := range fields {
		if got.Form.Get(k) != v {
			t.Errorf("%s %s: %s = %q, want %q (form %v)", method, path, k, got.Form.Get(k), v, got.Form)
		}
	}
}

func TestStripeCheckout(t *testing.T) {
	s, rec := newMockStripe(t)
	ctx := context.Background()
	expires := time.Now().Add(time.Hour).Truncate(time.Second)
	co, err := s.CreateCheckout(ctx, CheckoutInput{
		ReservationID: 42, Amount: 123456, Description: "Reservation #42: 8 × H100 for 24 h", BuyerEmail: "buyer@example.com",
		SuccessURL: "https://market.example/reservations/42?paid=1", CancelURL: "https://market.example/reservations/42",
		ExpiresAt: expires, IdempotencyKey: "res_42_checkout",
	})
	if err != nil {
		t.Fatal(err)
	}
	// stripe-mock answers with a fixture: check what it can tell us.
	if !strings.HasPrefix(co.ID, "cs_") || co.URL == "" {
		t.Errorf("checkout = %+v", co)
	}
	wantForm(t, rec.last(t), "POST", "/v1/checkout/sessions", "res_42_checkout", map[string]string{
		"mode":                                   "payment",
		"client_reference_id":                    "42",
		"metadata[reservation_id]":               "42",
		"customer_email":                         "buyer@example.com",
		"success_url":                            "https://market.example/reservations/42?paid=1",
		"cancel_url":                             "https://market.example/reservations/42",
		"expires_at":                             strconv.FormatInt(expires.Unix(), 10),
		"line_items[0][quantity]":                "1",
		"line_items[0][price_data][currency]":    "usd",
		"line_items[0][price_data][unit_amount]": "123456",
		"line_items[0][price_data][product_data][name]": "Reservation #42: 8 × H100 for 24 h",
		"payment_intent_data[transfer_group]":           "res_42",
		"payment_intent_data[metadata][reservation_id]": "42",
	})

	got, err := s.RetrieveCheckout(ctx, co.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != co.ID {
		t.Errorf("retrieved %+v", got)
	}
	wantForm(t, rec.last(t), "GET", "/v1/checkout/sessions/"+co.ID, "", nil)
	if err := s.ExpireCheckout(ctx, co.ID); err != nil {
		t.Fatal(err)
	}
	wantForm(t, rec.last(t), "POST", "/v1/checkout/sessions/"+co.ID+"/expire", co.ID+"_expire", nil)
	if stripe.Key != "" {
		t.Error("the processor set the global stripe.Key")
	}
}

func TestStripeRefundTransferAndRetrieve(t *testing.T) {
	s, rec := newMockStripe(t)
	ctx := context.Background()

	r, err := s.Refund(ctx, "pi_123", 2500, "res_42_refund")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.ID, "re_") {
		t.Errorf("refund = %+v", r)
	}
	wantForm(t, rec.last(t), "POST", "/v1/refunds", "res_42_refund", map[string]string{"payment_intent": "pi_123", "amount": "2500"})

	tr, err := s.Transfer(ctx, "acct_1Provider", 97500, "res_42", "res_42_transfer_p7")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tr.ID, "tr_") {
		t.Errorf("transfer = %+v", tr)
	}
	wantForm(t, rec.last(t), "POST", "/v1/transfers", "res_42_transfer_p7", map[string]string{
		"destination": "acct_1Provider", "amount": "97500", "currency": "usd", "transfer_group": "res_42",
	})

	pay, err := s.RetrievePayment(ctx, "pi_123")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(pay.ID, "pi_") || pay.Status == "" {
		t.Errorf("payment = %+v", pay)
	}
	wantForm(t, rec.last(t), "GET", "/v1/payment_intents/pi_123", "", nil)

	if _, err := s.RetrieveRefund(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	wantForm(t, rec.last(t), "GET", "/v1/refunds/"+r.ID, "", nil)
	if _, err := s.RetrieveTransfer(ctx, tr.ID); err != nil {
		t.Fatal(err)
	}
	wantForm(t, rec.last(t), "GET", "/v1/transfers/"+tr.ID, "", nil)
}

func TestStripeConnectedAccount(t *testing.T) {
	s, rec := newMockStripe(t)
	ctx := context.Background()
	a, err := s.CreateConnectedAccount(ctx, "provider@example.com", "provider_7_account")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(a.ID, "acct_") {
		t.Errorf("account = %+v", a)
	}
	wantForm(t, rec.last(t), "POST", "/v1/accounts", "provider_7_account", map[string]string{
		"type": "express", "email": "provider@example.com", "capabilities[transfers][requested]": "true",
	})

	link, err := s.AccountLink(ctx, a.ID, "https://market.example/provider/stripe/refresh", "https://market.example/provider/stripe/return")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(link, "https://") {
		t.Errorf("link = %q", link)
	}
	wantForm(t, rec.last(t), "POST", "/v1/account_links", "*", map[string]string{
		"account": a.ID, "type": "account_onboarding",
		"refresh_url": "https://market.example/provider/stripe/refresh", "return_url": "https://market.example/provider/stripe/return",
	})

	got, err := s.RetrieveAccount(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID == "" {
		t.Errorf("retrieved %+v", got)
	}
	wantForm(t, rec.last(t), "GET", "/v1/accounts/"+a.ID, "", nil)
}

func TestStripeRefusesBeforeCalling(t *testing.T) {
	s, rec := newMockStripe(t)
	ctx := context.Background()
	if _, err := s.Refund(ctx, "pi_123", 0, "k"); market.ErrorCode(err) != market.CodeInvalid {
		t.Errorf("zero refund: %v", err)
	}
	if _, err := s.Refund(ctx, "pi_123", 100, ""); err == nil {
		t.Error("refund without a key was accepted")
	}
	if _, err := s.Transfer(ctx, "acct_1", 100, "res_1", " "); err == nil {
		t.Error("transfer without a key was accepted")
	}
	if _, err := s.CreateCheckout(ctx, CheckoutInput{ReservationID: 1, Amount: 100, IdempotencyKey: "k"}); err == nil {
		t.Error("checkout without return URLs was accepted")
	}
	if _, err := s.CreateConnectedAccount(ctx, "a@b.c", ""); err == nil {
		t.Error("account without a key was accepted")
	}
	if rec.count() != 0 {
		t.Errorf("%d requests sent", rec.count())
	}
	if _, err := NewStripe(StripeConfig{WebhookSecret: "w"}); err == nil {
		t.Error("no secret key accepted")
	}
	if _, err := NewStripe(StripeConfig{SecretKey: "sk"}); err == nil {
		t.Error("no webhook secret accepted")
	}
}

// Error classification needs answers stripe-mock does not give: a fake
// server answers with a chosen status, or too slowly.
func TestStripeErrors(t *testing.T) {
	var status int
	var delay time.Duration
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Request-Id", "req_1")
		w.WriteHeader(status)
		io.WriteString(w, `{"error":{"type":"invalid_request_error","code":"resource_missing","message":"No such payment_intent"}}`)
	}))
	defer srv.Close()
	s, err := NewStripe(StripeConfig{SecretKey: "sk_test_1", WebhookSecret: "w", APIBase: srv.URL, HTTPClient: &http.Client{Timeout: 300 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tests := []struct {
		name      string
		status    int
		delay     time.Duration
		retryable bool
	}{
		{"not found", 404, 0, false},
		{"bad request", 400, 0, false},
		{"conflict on key", 409, 0, true},
		{"rate limited", 429, 0, true},
		{"stripe down", 500, 0, true},
		{"timeout", 200, time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, delay = tt.status, tt.delay
			_, err := s.Refund(ctx, "pi_1", 100, "k_"+tt.name)
			var be *Error
			if !errors.As(err, &be) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if Retryable(err) != tt.retryable || be.Op == "" {
				t.Errorf("retryable = %v, want %v (%v)", Retryable(err), tt.retryable, err)
			}
			if tt.delay == 0 && (be.Status != tt.status || be.Code != "resource_missing") {
				t.Errorf("status %d code %q", be.Status, be.Code)
			}
			if market.ErrorCode(err) != market.CodeInternal || strings.Contains(market.ErrorMessage(err), "pi_1") {
				t.Errorf("a processor error must read as internal: %s / %s", market.ErrorCode(err), market.ErrorMessage(err))
			}
		})
	}

	// A cancelled context and a refused connection are retryable too.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Transfer(cctx, "acct_1", 100, "res_1", "k_cancel"); !Retryable(err) {
		t.Errorf("cancelled: %v", err)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	dead, _ := NewStripe(StripeConfig{SecretKey: "sk_test_1", WebhookSecret: "w", APIBase: "http://" + addr})
	if _, err := dead.Refund(ctx, "pi_1", 100, "k_dead"); !Retryable(err) {
		t.Errorf("refused: %v", err)
	}
	if Retryable(errors.New("plain")) || Retryable(nil) {
		t.Error("plain errors are not retryable")
	}
}

// A balance top-up's checkout (docs/metered.md) names the top-up, not a
// reservation, and has no transfer group.
func TestStripeTopUpCheckout(t *testing.T) {
	s, rec := newMockStripe(t)
	co, err := s.CreateCheckout(context.Background(), CheckoutInput{TopUpID: 7, Amount: 2000,
		SuccessURL: "https://market.example/balance/top-up/return?top_up=7", CancelURL: "https://market.example/balance", IdempotencyKey: "topup_7"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(co.ID, "cs_") || co.URL == "" {
		t.Errorf("checkout = %+v", co)
	}
	got := rec.last(t)
	wantForm(t, got, "POST", "/v1/checkout/sessions", "topup_7", map[string]string{
		"client_reference_id":                           "topup_7",
		"metadata[top_up_id]":                           "7",
		"payment_intent_data[metadata][top_up_id]":      "7",
		"line_items[0][price_data][unit_amount]":        "2000",
		"line_items[0][price_data][product_data][name]": "Balance top-up #7",
	})
	for _, k := range []string{"metadata[reservation_id]", "payment_intent_data[transfer_group]"} {
		if v := got.Form.Get(k); v != "" {
			t.Errorf("%s = %q on a top-up's checkout", k, v)
		}
	}
}

package billing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

func TestStripeSetupCheckout(t *testing.T) {
	s, rec := newMockStripe(t)
	ctx := context.Background()
	co, err := s.CreateSetupCheckout(ctx, SetupInput{UserID: 7, BuyerEmail: "buyer@example.com",
		SuccessURL: "https://market.example/account/payment-methods/return", CancelURL: "https://market.example/account#payment-methods"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(co.ID, "cs_") || co.URL == "" {
		t.Errorf("setup checkout = %+v", co)
	}
	if rec.count() != 2 {
		t.Fatalf("%d requests, want a customer then a session", rec.count())
	}
	customer := rec.reqs[0]
	wantForm(t, customer, "POST", "/v1/customers", "user_7_customer", map[string]string{
		"email": "buyer@example.com", "metadata[user_id]": "7",
	})
	session := rec.last(t)
	wantForm(t, session, "POST", "/v1/checkout/sessions", "*", map[string]string{
		"mode":                                 "setup",
		"payment_method_types[0]":              "card",
		"success_url":                          "https://market.example/account/payment-methods/return?setup={CHECKOUT_SESSION_ID}",
		"cancel_url":                           "https://market.example/account#payment-methods",
		"metadata[user_id]":                    "7",
		"setup_intent_data[metadata][user_id]": "7",
	})
	if !strings.HasPrefix(session.Form.Get("customer"), "cus_") {
		t.Errorf("session customer %q, want the customer just created", session.Form.Get("customer"))
	}
	for _, k := range []string{"line_items[0][quantity]", "payment_intent_data[metadata][reservation_id]"} {
		if session.Form.Has(k) {
			t.Errorf("a setup session sends %s", k)
		}
	}

	// A buyer with a customer: no new customer, the session is for it.
	if _, err := s.CreateSetupCheckout(ctx, SetupInput{UserID: 7, Customer: "cus_known", SuccessURL: "https://m.example/r?x=1",
		CancelURL: "https://m.example/c"}); err != nil {
		t.Fatal(err)
	}
	if rec.count() != 3 {
		t.Fatalf("%d requests, want one more (the session only)", rec.count())
	}
	wantForm(t, rec.last(t), "POST", "/v1/checkout/sessions", "*", map[string]string{
		"customer": "cus_known", "mode": "setup", "success_url": "https://m.example/r?x=1&setup={CHECKOUT_SESSION_ID}",
	})

	// Retrieving asks for the card with the session; stripe-mock's
	// fixture is no completed setup, which is a conflict for the buyer.
	_, err = s.RetrieveSetup(ctx, co.ID)
	got := rec.last(t)
	if got.Method != "GET" || got.Path != "/v1/checkout/sessions/"+co.ID || got.Form.Get("expand[0]") != "setup_intent.payment_method" {
		t.Errorf("retrieve setup sent %s %s %v", got.Method, got.Path, got.Form)
	}
	if market.ErrorCode(err) != market.CodeConflict {
		t.Errorf("retrieve of the mock's fixture: %v, want a conflict (not a completed setup)", err)
	}
	if _, err := s.CreateSetupCheckout(ctx, SetupInput{UserID: 7}); err == nil || rec.count() != 4 {
		t.Errorf("setup without return URLs: err %v, %d requests", err, rec.count())
	}
}

// A completed setup session as Stripe returns it expanded: stripe-mock's
// fixtures are not one, so a fake server answers.
func TestStripeRetrieveSetup(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/checkout/sessions/cs_setup_1" || r.URL.Query().Get("expand[0]") != "setup_intent.payment_method" {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":{"type":"invalid_request_error","code":"resource_missing","message":"No such session"}}`)
			return
		}
		io.WriteString(w, `{"id":"cs_setup_1","object":"checkout.session","mode":"setup","status":"complete",
			"customer":"cus_9","metadata":{"user_id":"7"},
			"setup_intent":{"id":"seti_1","object":"setup_intent","status":"succeeded",
				"payment_method":{"id":"pm_visa","object":"payment_method","type":"card","card":{"brand":"visa","last4":"4242"}}}}`)
	}))
	defer srv.Close()
	s, err := NewStripe(StripeConfig{SecretKey: "sk_test_1", WebhookSecret: "w", APIBase: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	sm, err := s.RetrieveSetup(context.Background(), "cs_setup_1")
	if err != nil {
		t.Fatal(err)
	}
	want := SavedMethod{CheckoutID: "cs_setup_1", UserID: 7, Customer: "cus_9", PaymentMethodID: "pm_visa", Brand: "visa", Last4: "4242", Label: "Visa •••• 4242"}
	if sm != want {
		t.Errorf("saved method %+v, want %+v", sm, want)
	}
}

func TestStripeChargeSaved(t *testing.T) {
	s, rec := newMockStripe(t)
	ctx := context.Background()
	p, err := s.ChargeSaved(ctx, ChargeInput{ReservationID: 42, Customer: "cus_9", PaymentMethodID: "pm_visa", Amount: 19920,
		Description: "Reservation #42", IdempotencyKey: "res_42_saved_3"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(p.ID, "pi_") {
		t.Errorf("payment %+v", p)
	}
	wantForm(t, rec.last(t), "POST", "/v1/payment_intents", "res_42_saved_3", map[string]string{
		"amount": "19920", "currency": "usd", "customer": "cus_9", "payment_method": "pm_visa",
		"off_session": "true", "confirm": "true", "payment_method_types[0]": "card",
		"metadata[reservation_id]": "42", "transfer_group": "res_42", "description": "Reservation #42",
	})

	// A payment that is not a reservation's carries neither.
	if _, err := s.ChargeSaved(ctx, ChargeInput{Customer: "cus_9", PaymentMethodID: "pm_visa", Amount: 500, IdempotencyKey: "resale_5"}); err != nil {
		t.Fatal(err)
	}
	got := rec.last(t)
	wantForm(t, got, "POST", "/v1/payment_intents", "resale_5", map[string]string{"off_session": "true", "confirm": "true", "amount": "500"})
	if got.Form.Has("metadata[reservation_id]") || got.Form.Has("transfer_group") {
		t.Errorf("a payment without a reservation sent %v", got.Form)
	}

	// Refused before calling: no key, no amount, no card.
	n := rec.count()
	for _, in := range []ChargeInput{
		{Customer: "cus_9", PaymentMethodID: "pm_visa", Amount: 500},
		{Customer: "cus_9", PaymentMethodID: "pm_visa", IdempotencyKey: "k"},
		{Customer: "cus_9", Amount: 500, IdempotencyKey: "k"},
	} {
		if _, err := s.ChargeSaved(ctx, in); err == nil {
			t.Errorf("charge %+v accepted", in)
		}
	}
	if rec.count() != n {
		t.Errorf("%d requests sent for refused charges", rec.count()-n)
	}
}

// Declines need answers stripe-mock does not give: a fake server answers
// as Stripe does, 402 with a card error carrying the failed intent.
func TestStripeChargeSavedDeclined(t *testing.T) {
	var code, declineCode string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Request-Id", "req_1")
		w.WriteHeader(http.StatusPaymentRequired)
		io.WriteString(w, `{"error":{"type":"card_error","code":"`+code+`","decline_code":"`+declineCode+`","message":"Your card was declined.",
			"payment_intent":{"id":"pi_declined","object":"payment_intent","status":"requires_payment_method"}}}`)
	}))
	defer srv.Close()
	s, err := NewStripe(StripeConfig{SecretKey: "sk_test_1", WebhookSecret: "w", APIBase: srv.URL, HTTPClient: &http.Client{Timeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ code, decline string }{{"card_declined", "insufficient_funds"}, {"authentication_required", ""}} {
		code, declineCode = tt.code, tt.decline
		_, err := s.ChargeSaved(context.Background(), ChargeInput{ReservationID: 1, Customer: "cus_1", PaymentMethodID: "pm_1", Amount: 100, IdempotencyKey: "k_" + tt.code})
		d, ok := AsDecline(err)
		if !ok {
			t.Fatalf("%s: err %v, want a *Decline", tt.code, err)
		}
		if d.PaymentIntentID != "pi_declined" || d.Code != tt.code || d.DeclineCode != tt.decline {
			t.Errorf("decline %+v, want pi_declined %s %s", d, tt.code, tt.decline)
		}
		if Retryable(err) || market.ErrorCode(err) != market.CodeInternal {
			t.Errorf("a decline is not retryable and not a message for people as is: %v", err)
		}
	}
}

func TestLocalSavedCards(t *testing.T) {
	st := newTestStore()
	l := NewLocal(LocalConfig{Store: st})
	ctx := context.Background()
	save := func(userID int64, customer, card string) SavedMethod {
		t.Helper()
		co, err := l.CreateSetupCheckout(ctx, SetupInput{UserID: userID, Customer: customer, SuccessURL: "/back", CancelURL: "/account"})
		if err != nil {
			t.Fatal(err)
		}
		if co.URL != "/setup/local/"+co.ID {
			t.Errorf("setup URL %q", co.URL)
		}
		if _, err := l.RetrieveSetup(ctx, co.ID); market.ErrorCode(err) != market.CodeConflict {
			t.Errorf("retrieve before the card is chosen: %v, want a conflict", err)
		}
		in, err := l.SetupInput(co.ID)
		if err != nil || in.UserID != userID {
			t.Fatalf("setup input %+v, %v", in, err)
		}
		sm, err := l.CompleteSetup(co.ID, card)
		if err != nil {
			t.Fatal(err)
		}
		again, err := l.RetrieveSetup(ctx, co.ID)
		if err != nil || again != sm {
			t.Errorf("retrieve %+v, %v; completed %+v", again, err, sm)
		}
		return sm
	}
	visa := save(7, "", "4242 4242 4242 4242")
	if visa.Label != "Visa •••• 4242" || visa.UserID != 7 || !strings.HasPrefix(visa.Customer, "local_cus_") || !strings.HasPrefix(visa.PaymentMethodID, "local_pm_") {
		t.Errorf("saved %+v", visa)
	}
	declining := save(7, visa.Customer, "4000000000000002")
	if declining.Label != "Visa •••• 0002" || declining.Customer != visa.Customer {
		t.Errorf("saved %+v", declining)
	}
	// A second setup without a customer finds the same one for the user.
	if other := save(7, "", "5555 5555 5555 4444"); other.Customer != visa.Customer || other.Label != "Mastercard •••• 4444" {
		t.Errorf("saved %+v, want customer %s", other, visa.Customer)
	}
	if other := save(8, "", "4242424242424242"); other.Customer == visa.Customer {
		t.Errorf("two users share customer %s", other.Customer)
	}
	co, _ := l.CreateSetupCheckout(ctx, SetupInput{UserID: 7, SuccessURL: "/b", CancelURL: "/c"})
	if _, err := l.CompleteSetup(co.ID, "4111 1111 1111 1111"); market.ErrorCode(err) != market.CodeInvalid {
		t.Errorf("a card not offered: %v", err)
	}

	// A card that succeeds: paid at once; the same key again is the same
	// payment, charged once.
	in := ChargeInput{ReservationID: 12, Customer: visa.Customer, PaymentMethodID: visa.PaymentMethodID, Amount: 19920, IdempotencyKey: "res_12_saved_1"}
	p, err := l.ChargeSaved(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Succeeded || p.Amount != 19920 || p.AmountReceived != 19920 || p.ReservationID != 12 || p.TransferGroup != "res_12" || p.ChargeID == "" {
		t.Errorf("payment %+v", p)
	}
	var wg sync.WaitGroup
	ids := make([]string, 4)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q, err := l.ChargeSaved(ctx, in)
			if err != nil {
				t.Error(err)
			}
			ids[i] = q.ID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != p.ID {
			t.Errorf("a retried charge made payment %s, want %s", id, p.ID)
		}
	}
	if got, err := l.RetrievePayment(ctx, p.ID); err != nil || !reflect.DeepEqual(got, p) {
		t.Errorf("retrieved %+v, %v; want %+v", got, err, p)
	}
	if n := countKind(st, localPayment); n != 1 {
		t.Errorf("%d payments stored, want 1", n)
	}
	// The key with other arguments is refused, as at Stripe.
	other := in
	other.Amount = 100
	if _, err := l.ChargeSaved(ctx, other); market.ErrorCode(err) != market.CodeConflict {
		t.Errorf("key reused for another amount: %v", err)
	}
	// The payment refunds as a checkout's does.
	if _, err := l.Refund(ctx, p.ID, 19920, "res_12_refund"); err != nil {
		t.Errorf("refund of a saved card's payment: %v", err)
	}

	// The declining card: a *Decline, the failed payment kept, the same
	// decline on a retry.
	din := ChargeInput{ReservationID: 13, Customer: declining.Customer, PaymentMethodID: declining.PaymentMethodID, Amount: 500, IdempotencyKey: "res_13_saved_2"}
	for range 2 {
		_, err := l.ChargeSaved(ctx, din)
		d, ok := AsDecline(err)
		if !ok || d.Code != "card_declined" || !strings.HasPrefix(d.PaymentIntentID, "local_pi_") {
			t.Fatalf("declining card: %v", err)
		}
		failed, err := l.RetrievePayment(ctx, d.PaymentIntentID)
		if err != nil || failed.Succeeded || failed.AmountReceived != 0 || failed.Status != "requires_payment_method" {
			t.Errorf("declined payment %+v, %v", failed, err)
		}
	}
	// Another customer's card is not charged.
	if _, err := l.ChargeSaved(ctx, ChargeInput{Customer: "local_cus_else", PaymentMethodID: visa.PaymentMethodID, Amount: 5, IdempotencyKey: "x"}); market.ErrorCode(err) != market.CodeInvalid {
		t.Errorf("charge with another customer: %v", err)
	}
	if _, err := l.ChargeSaved(ctx, ChargeInput{Customer: visa.Customer, PaymentMethodID: "local_pm_nope", Amount: 5, IdempotencyKey: "y"}); market.ErrorCode(err) != market.CodeNotFound {
		t.Errorf("charge of an unknown card: %v", err)
	}
}

func countKind(s *testStore, kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k := range s.objects {
		if k[0] == kind {
			n++
		}
	}
	return n
}

// An automatic top-up's off-session charge (workflow.chargeTopUp, the
// balance's own key topup_<id>, no reservation nor transfer group) against
// stripe-mock.
func TestStripeChargeSavedTopUp(t *testing.T) {
	s, rec := newMockStripe(t)
	p, err := s.ChargeSaved(context.Background(), ChargeInput{Customer: "cus_9", PaymentMethodID: "pm_visa", Amount: 1000,
		Description: "Balance top-up #12", IdempotencyKey: "topup_12", Metadata: map[string]string{"top_up_id": "12"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(p.ID, "pi_") {
		t.Errorf("payment %+v", p)
	}
	got := rec.last(t)
	wantForm(t, got, "POST", "/v1/payment_intents", "topup_12", map[string]string{
		"amount": "1000", "customer": "cus_9", "payment_method": "pm_visa", "off_session": "true", "confirm": "true",
		"metadata[top_up_id]": "12", "description": "Balance top-up #12",
	})
	for _, k := range []string{"metadata[reservation_id]", "transfer_group"} {
		if v := got.Form.Get(k); v != "" {
			t.Errorf("%s = %q on a top-up's charge", k, v)
		}
	}
}

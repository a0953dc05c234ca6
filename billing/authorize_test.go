package billing

import (
	"context"
	"testing"

	"github.com/gpumarket/gpumarket/market"
)

// TestStripeAuthorizeCaptureRelease: an authorisation is a PaymentIntent
// with manual capture; a capture sends the amount to take under its own
// key, and a release cancels the intent (stripe-mock).
func TestStripeAuthorizeCaptureRelease(t *testing.T) {
	s, rec := newMockStripe(t)
	ctx := context.Background()
	p, err := s.ChargeSaved(ctx, ChargeInput{ReservationID: 42, Customer: "cus_9", PaymentMethodID: "pm_visa", Amount: 1200,
		IdempotencyKey: "spot_auth_7_1", Authorize: true})
	if err != nil {
		t.Fatal(err)
	}
	wantForm(t, rec.last(t), "POST", "/v1/payment_intents", "spot_auth_7_1", map[string]string{
		"amount": "1200", "capture_method": "manual", "confirm": "true", "off_session": "true"})
	if _, err := s.Capture(ctx, CaptureInput{PaymentIntentID: p.ID, Amount: 900, IdempotencyKey: "spot_capture_7_1", ReservationID: 42}); err != nil {
		t.Fatal(err)
	}
	wantForm(t, rec.last(t), "POST", "/v1/payment_intents/"+p.ID+"/capture", "spot_capture_7_1", map[string]string{"amount_to_capture": "900"})
	if named := rec.reqs[len(rec.reqs)-2]; named.Path != "/v1/payment_intents/"+p.ID || named.Form.Get("metadata[reservation_id]") != "42" ||
		named.Form.Get("transfer_group") != "res_42" {
		t.Errorf("before the capture %s %v, want the reservation named", named.Path, named.Form)
	}
	if err := s.ReleaseAuthorization(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	if got := rec.last(t); got.Method != "POST" || got.Path != "/v1/payment_intents/"+p.ID+"/cancel" {
		t.Errorf("release sent %s %s", got.Method, got.Path)
	}
	n := rec.count()
	if _, err := s.Capture(ctx, CaptureInput{PaymentIntentID: p.ID, IdempotencyKey: "k"}); err == nil {
		t.Error("a capture of nothing was accepted")
	}
	if _, err := s.Capture(ctx, CaptureInput{PaymentIntentID: p.ID, Amount: 100}); err == nil {
		t.Error("a capture without a key was accepted")
	}
	if rec.count() != n {
		t.Errorf("%d requests sent for refused captures", rec.count()-n)
	}
}

// TestLocalAuthorizeCaptureRelease: the local processor holds an
// authorised amount without receiving it, captures at most that amount
// once per key, and a released authorisation cannot be captured.
func TestLocalAuthorizeCaptureRelease(t *testing.T) {
	st := newTestStore()
	l := NewLocal(LocalConfig{Store: st})
	ctx := context.Background()
	co, err := l.CreateSetupCheckout(ctx, SetupInput{UserID: 3, SuccessURL: "/b", CancelURL: "/c"})
	if err != nil {
		t.Fatal(err)
	}
	card, err := l.CompleteSetup(co.ID, "4242424242424242")
	if err != nil {
		t.Fatal(err)
	}
	auth := func(key string, amount market.Cents) Payment {
		t.Helper()
		p, err := l.ChargeSaved(ctx, ChargeInput{Customer: card.Customer, PaymentMethodID: card.PaymentMethodID, Amount: amount,
			IdempotencyKey: key, Authorize: true})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := auth("auth_1", 1200)
	if p.Succeeded || p.Status != "requires_capture" || p.AmountReceived != 0 || p.Amount != 1200 {
		t.Fatalf("authorisation %+v", p)
	}
	if _, err := l.Capture(ctx, CaptureInput{PaymentIntentID: p.ID, Amount: 1201, IdempotencyKey: "cap_1"}); market.ErrorCode(err) != market.CodeInvalid {
		t.Errorf("capture above the authorisation: %v", err)
	}
	got, err := l.Capture(ctx, CaptureInput{PaymentIntentID: p.ID, Amount: 900, IdempotencyKey: "cap_1", ReservationID: 12})
	if err != nil || !got.Succeeded || got.AmountReceived != 900 || got.ReservationID != 12 || got.TransferGroup != "res_12" {
		t.Fatalf("capture %+v, %v", got, err)
	}
	if again, err := l.Capture(ctx, CaptureInput{PaymentIntentID: p.ID, Amount: 900, IdempotencyKey: "cap_1"}); err != nil || again.AmountReceived != 900 {
		t.Errorf("repeated capture %+v, %v", again, err)
	}
	if _, err := l.Capture(ctx, CaptureInput{PaymentIntentID: p.ID, Amount: 100, IdempotencyKey: "cap_2"}); market.ErrorCode(err) != market.CodeConflict {
		t.Errorf("a second capture under another key: %v", err)
	}
	if err := l.ReleaseAuthorization(ctx, p.ID); market.ErrorCode(err) != market.CodeConflict {
		t.Errorf("release of a captured payment: %v", err)
	}

	q := auth("auth_2", 500)
	if err := l.ReleaseAuthorization(ctx, q.ID); err != nil {
		t.Fatal(err)
	}
	if err := l.ReleaseAuthorization(ctx, q.ID); err != nil {
		t.Errorf("second release: %v", err)
	}
	if _, err := l.Capture(ctx, CaptureInput{PaymentIntentID: q.ID, Amount: 500, IdempotencyKey: "cap_3"}); market.ErrorCode(err) != market.CodeConflict {
		t.Errorf("capture of a released authorisation: %v", err)
	}
	if r, err := l.RetrievePayment(ctx, q.ID); err != nil || r.Status != "canceled" || r.AmountReceived != 0 {
		t.Errorf("released payment %+v, %v", r, err)
	}
}

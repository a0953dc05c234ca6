package billing

import (
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/gpumarket/gpumarket/market"
)

const testSecret = "whsec_test"

func webhookProcessor(t *testing.T) *Stripe {
	t.Helper()
	// Parsing webhooks makes no API calls: no stripe-mock needed.
	s, err := NewStripe(StripeConfig{SecretKey: "sk_test_1", WebhookSecret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestWebhookMapsEveryType(t *testing.T) {
	s := webhookProcessor(t)
	now := time.Now().UTC().Truncate(time.Second)
	tests := []struct {
		stripeType string
		object     map[string]any
		want       Event
	}{
		{"payment_intent.succeeded",
			map[string]any{"id": "pi_1", "object": "payment_intent", "amount": 123456, "status": "succeeded",
				"metadata": map[string]any{"reservation_id": "42"}, "transfer_group": "res_42", "latest_charge": "ch_1"},
			Event{Type: EventPaymentSucceeded, ReservationID: 42, PaymentIntentID: "pi_1", ChargeID: "ch_1", AmountCents: 123456}},
		{"payment_intent.payment_failed",
			map[string]any{"id": "pi_2", "object": "payment_intent", "amount": 500, "status": "requires_payment_method",
				"metadata": map[string]any{}, "transfer_group": "res_43", "last_payment_error": map[string]any{"message": "Your card was declined."}},
			Event{Type: EventPaymentFailed, ReservationID: 43, PaymentIntentID: "pi_2", AmountCents: 500, FailureMessage: "Your card was declined."}},
		{"checkout.session.completed",
			map[string]any{"id": "cs_1", "object": "checkout.session", "amount_total": 123456, "payment_status": "paid",
				"client_reference_id": "42", "metadata": map[string]any{"reservation_id": "42"}, "payment_intent": "pi_1"},
			Event{Type: EventCheckoutCompleted, ReservationID: 42, CheckoutID: "cs_1", PaymentIntentID: "pi_1", AmountCents: 123456, PaymentStatus: "paid"}},
		{"checkout.session.async_payment_succeeded",
			map[string]any{"id": "cs_2", "object": "checkout.session", "amount_total": 900, "payment_status": "paid",
				"client_reference_id": "44", "payment_intent": "pi_4"},
			Event{Type: EventPaymentSucceeded, ReservationID: 44, CheckoutID: "cs_2", PaymentIntentID: "pi_4", AmountCents: 900, PaymentStatus: "paid"}},
		{"checkout.session.async_payment_failed",
			map[string]any{"id": "cs_3", "object": "checkout.session", "amount_total": 900, "payment_status": "unpaid",
				"metadata": map[string]any{"reservation_id": "45"}},
			Event{Type: EventPaymentFailed, ReservationID: 45, CheckoutID: "cs_3", AmountCents: 900, PaymentStatus: "unpaid"}},
		{"checkout.session.completed",
			map[string]any{"id": "cs_setup", "object": "checkout.session", "mode": "setup", "status": "complete",
				"payment_status": "no_payment_required", "customer": "cus_9", "metadata": map[string]any{"user_id": "7"}, "setup_intent": "seti_1"},
			Event{Type: EventSetupCompleted, UserID: 7, CheckoutID: "cs_setup", PaymentStatus: "no_payment_required"}},
		{"charge.refunded",
			map[string]any{"id": "ch_1", "object": "charge", "amount": 123456, "amount_refunded": 2500, "refunded": false,
				"payment_intent": "pi_1", "transfer_group": "res_42"},
			Event{Type: EventChargeRefunded, ReservationID: 42, ChargeID: "ch_1", PaymentIntentID: "pi_1", AmountCents: 2500}},
		{"charge.dispute.created",
			map[string]any{"id": "dp_1", "object": "dispute", "amount": 123456, "reason": "fraudulent", "payment_intent": "pi_1",
				"charge": map[string]any{"id": "ch_1", "object": "charge", "transfer_group": "res_42"}},
			Event{Type: EventDisputeCreated, ReservationID: 42, DisputeID: "dp_1", ChargeID: "ch_1", PaymentIntentID: "pi_1", AmountCents: 123456}},
		{"account.updated",
			map[string]any{"id": "acct_1", "object": "account", "details_submitted": true, "charges_enabled": true, "payouts_enabled": false},
			Event{Type: EventAccountUpdated, AccountID: "acct_1", DetailsSubmitted: true, ChargesEnabled: true}},
		{"customer.created",
			map[string]any{"id": "cus_1", "object": "customer"},
			Event{Type: EventIgnored}},
	}
	for i, tt := range tests {
		t.Run(tt.stripeType, func(t *testing.T) {
			id := "evt_" + string(rune('a'+i))
			payload, header := SignTestEvent(testSecret, id, tt.stripeType, tt.object, now)
			got, err := s.ParseWebhook(payload, header)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want
			want.ID, want.StripeType, want.Created = id, tt.stripeType, now
			if got != want {
				t.Errorf("event\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestWebhookRefusesUnverified(t *testing.T) {
	s := webhookProcessor(t)
	obj := map[string]any{"id": "pi_1", "object": "payment_intent", "amount": 100}
	payload, header := SignTestEvent(testSecret, "evt_1", "payment_intent.succeeded", obj, time.Now())
	_, otherHeader := SignTestEvent("whsec_other", "evt_1", "payment_intent.succeeded", obj, time.Now())
	_, oldHeader := SignTestEvent(testSecret, "evt_1", "payment_intent.succeeded", obj, time.Now().Add(-time.Hour))
	tampered := []byte(strings.Replace(string(payload), `"amount":100`, `"amount":1`, 1))
	if string(tampered) == string(payload) {
		t.Fatal("tampering did not change the payload")
	}
	tests := []struct {
		name    string
		payload []byte
		header  string
	}{
		{"missing header", payload, ""},
		{"wrong secret", payload, otherHeader},
		{"tampered body", tampered, header},
		{"replayed after the tolerance", payload, oldHeader},
		{"garbage header", payload, "nonsense"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.ParseWebhook(tt.payload, tt.header)
			if market.ErrorCode(err) != market.CodeInvalid || market.ErrorMessage(err) != "The webhook signature is missing or invalid." {
				t.Errorf("err = %v (code %s)", err, market.ErrorCode(err))
			}
		})
	}
	if _, err := s.ParseWebhook(payload, header); err != nil {
		t.Errorf("the untouched payload: %v", err)
	}
}

// A payload signed with stripe-go's own helper, not ours, verifies too.
func TestWebhookStripeSignedPayload(t *testing.T) {
	s := webhookProcessor(t)
	payload := []byte(`{"id":"evt_9","object":"event","type":"account.updated","created":1700000000,` +
		`"data":{"object":{"id":"acct_9","object":"account","details_submitted":true,"charges_enabled":true,"payouts_enabled":true}}}`)
	sp := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: testSecret})
	ev, err := s.ParseWebhook(sp.Payload, sp.Header)
	if err != nil {
		t.Fatal(err)
	}
	if ev.ID != "evt_9" || ev.Type != EventAccountUpdated || ev.AccountID != "acct_9" || !ev.PayoutsEnabled ||
		!ev.DetailsSubmitted || !ev.ChargesEnabled || ev.Created != time.Unix(1700000000, 0).UTC() {
		t.Errorf("event = %+v", ev)
	}
	// A verified payload whose object does not decode is an internal error, not a bad signature.
	bad := []byte(`{"id":"evt_8","object":"event","type":"charge.refunded","data":{"object":{"amount":"lots"}}}`)
	sp = webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: bad, Secret: testSecret})
	if _, err := s.ParseWebhook(sp.Payload, sp.Header); err == nil || market.ErrorCode(err) != market.CodeInternal {
		t.Errorf("undecodable object: %v", err)
	}
}

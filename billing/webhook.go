package billing

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/gpumarket/gpumarket/market"
)

// badSignature is what a caller (and a log) sees for an unverifiable
// webhook; the cause is wrapped with it.
func badSignature() error {
	return &market.Error{Code: market.CodeInvalid, Message: "The webhook signature is missing or invalid."}
}

// parseWebhook verifies a Stripe-signed payload and maps it to an Event.
// Signatures older than webhook.DefaultTolerance (5 minutes) are refused,
// which bounds replays. The event's API version is not checked against
// stripe-go's: only a few long-stable fields are read.
func parseWebhook(payload []byte, header, secret string) (Event, error) {
	if header == "" {
		return Event{}, fmt.Errorf("billing: webhook: %w: %w", badSignature(), webhook.ErrNotSigned)
	}
	se, err := webhook.ConstructEventWithOptions(payload, header, secret, webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true})
	if err != nil {
		return Event{}, fmt.Errorf("billing: webhook: %w: %w", badSignature(), err)
	}
	ev := Event{ID: se.ID, StripeType: string(se.Type), Created: time.Unix(se.Created, 0).UTC(), Type: EventIgnored}
	if se.Data == nil {
		return ev, nil
	}
	raw := se.Data.Raw
	bad := func(err error) (Event, error) {
		return Event{}, fmt.Errorf("billing: webhook %s (%s): decode object: %w", se.ID, se.Type, err)
	}
	switch se.Type {
	case "payment_intent.succeeded", "payment_intent.payment_failed":
		var pi stripe.PaymentIntent
		if err := json.Unmarshal(raw, &pi); err != nil {
			return bad(err)
		}
		ev.Type = EventPaymentSucceeded
		if se.Type == "payment_intent.payment_failed" {
			ev.Type = EventPaymentFailed
			if pi.LastPaymentError != nil {
				ev.FailureMessage = pi.LastPaymentError.Msg
			}
		}
		ev.PaymentIntentID, ev.AmountCents, ev.Currency = pi.ID, market.Cents(pi.Amount), string(pi.Currency)
		if pi.AmountReceived > 0 {
			// What actually arrived, which is what the reservation is checked against.
			ev.AmountCents = market.Cents(pi.AmountReceived)
		}
		ev.ReservationID = reservationIDFrom(pi.Metadata, "", pi.TransferGroup)
		if pi.LatestCharge != nil {
			ev.ChargeID = pi.LatestCharge.ID
		}
	case "checkout.session.completed", "checkout.session.async_payment_succeeded", "checkout.session.async_payment_failed":
		var cs stripe.CheckoutSession
		if err := json.Unmarshal(raw, &cs); err != nil {
			return bad(err)
		}
		switch se.Type {
		case "checkout.session.completed":
			ev.Type = EventCheckoutCompleted
		case "checkout.session.async_payment_succeeded":
			ev.Type = EventPaymentSucceeded
		default:
			ev.Type = EventPaymentFailed
		}
		ev.CheckoutID, ev.AmountCents, ev.PaymentStatus, ev.Currency = cs.ID, market.Cents(cs.AmountTotal), string(cs.PaymentStatus), string(cs.Currency)
		ev.ReservationID = reservationIDFrom(cs.Metadata, cs.ClientReferenceID, "")
		if id, err := strconv.ParseInt(cs.Metadata[MetadataTopUpID], 10, 64); err == nil && id > 0 {
			ev.TopUpID, ev.ReservationID = id, 0 // a balance top-up, not a reservation's payment
		}
		if cs.PaymentIntent != nil {
			ev.PaymentIntentID = cs.PaymentIntent.ID
		}
		if cs.Mode == stripe.CheckoutSessionModeSetup {
			// A saved card, not a payment: no reservation, no money.
			ev.Type, ev.ReservationID, ev.PaymentIntentID = EventIgnored, 0, ""
			if se.Type == "checkout.session.completed" {
				ev.Type = EventSetupCompleted
				ev.UserID, _ = strconv.ParseInt(cs.Metadata[MetadataUserID], 10, 64)
			}
		}
	case "charge.refunded":
		var ch stripe.Charge
		if err := json.Unmarshal(raw, &ch); err != nil {
			return bad(err)
		}
		ev.Type = EventChargeRefunded
		ev.ChargeID, ev.AmountCents = ch.ID, market.Cents(ch.AmountRefunded)
		ev.ReservationID = reservationIDFrom(ch.Metadata, "", ch.TransferGroup)
		if ch.PaymentIntent != nil {
			ev.PaymentIntentID = ch.PaymentIntent.ID
		}
	case "charge.dispute.created", "charge.dispute.closed":
		var d stripe.Dispute
		if err := json.Unmarshal(raw, &d); err != nil {
			return bad(err)
		}
		ev.Type = EventDisputeCreated
		if se.Type == "charge.dispute.closed" {
			ev.Type, ev.DisputeStatus = EventDisputeClosed, string(d.Status)
		}
		ev.DisputeID, ev.AmountCents, ev.Currency = d.ID, market.Cents(d.Amount), string(d.Currency)
		ev.ReservationID = reservationIDFrom(d.Metadata, "", "")
		if d.Charge != nil {
			ev.ChargeID = d.Charge.ID
			if ev.ReservationID == 0 {
				ev.ReservationID = reservationIDFrom(d.Charge.Metadata, "", d.Charge.TransferGroup)
			}
		}
		if d.PaymentIntent != nil {
			ev.PaymentIntentID = d.PaymentIntent.ID
		}
	case "account.updated":
		var a stripe.Account
		if err := json.Unmarshal(raw, &a); err != nil {
			return bad(err)
		}
		ev.Type = EventAccountUpdated
		ev.AccountID, ev.DetailsSubmitted, ev.ChargesEnabled, ev.PayoutsEnabled = a.ID, a.DetailsSubmitted, a.ChargesEnabled, a.PayoutsEnabled
	}
	return ev, nil
}

// SignTestEvent builds a Stripe event of the given type around object and
// signs it with secret at time at, as Stripe would deliver it. It is for
// tests (of this package and of the web layer's webhook route) and for
// delivering the local processor's simulated events; Stripe signs real ones.
func SignTestEvent(secret, eventID, stripeType string, object map[string]any, at time.Time) (payload []byte, header string) {
	payload, err := json.Marshal(map[string]any{
		"id": eventID, "object": "event", "api_version": stripe.APIVersion, "type": stripeType,
		"created": at.Unix(), "livemode": false, "data": map[string]any{"object": object},
	})
	if err != nil {
		panic(fmt.Sprintf("billing: SignTestEvent: %v", err)) // only unmarshalable test objects get here
	}
	sp := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: at})
	return payload, sp.Header
}

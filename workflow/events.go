package workflow

import (
	"context"
	"log/slog"
	"time"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// ApplyEvent acts on one verified processor event, whether it came by
// webhook or from the local processor inside this process. Every store call
// deduplicates on the event id in the same transaction as its effect, so a
// replay changes nothing; each is written to be safe in any order.
func (s *Service) ApplyEvent(ctx context.Context, log *slog.Logger, ev billing.Event) error {
	now := s.now()
	log = log.With("event_id", ev.ID, "event_type", ev.StripeType, "reservation_id", ev.ReservationID)
	switch ev.Type {
	case billing.EventCheckoutCompleted, billing.EventPaymentSucceeded:
		if ev.TopUpID != 0 { // a balance top-up's hosted payment (metered.go)
			if ev.Type == billing.EventCheckoutCompleted && ev.PaymentStatus == "paid" {
				return s.completeTopUpCheckout(ctx, ev.TopUpID, ev.CheckoutID, ev.PaymentIntentID)
			}
			_, err := s.db.MarkEventProcessed(ctx, ev.ID, ev.StripeType, now)
			return err
		}
		if ev.Type == billing.EventCheckoutCompleted && ev.PaymentStatus != "paid" {
			// Delayed payment methods: the payment event follows.
			_, err := s.db.MarkEventProcessed(ctx, ev.ID, ev.StripeType, now)
			return err
		}
		if _, err := s.recordPayment(ctx, log, store.PaymentEvent{
			EventID: ev.ID, EventType: ev.StripeType, ReservationID: ev.ReservationID, CheckoutID: ev.CheckoutID,
			PaymentIntentID: ev.PaymentIntentID, ChargeID: ev.ChargeID, Amount: ev.AmountCents, Currency: ev.Currency,
		}, now); err != nil {
			return err
		}
	case billing.EventPaymentFailed:
		if _, err := s.db.RecordPaymentFailed(ctx, ev.ID, ev.StripeType, ev.ReservationID, ev.PaymentIntentID, ev.FailureMessage, now); err != nil {
			return err
		}
		log.Info("payment failed", "message", ev.FailureMessage)
	case billing.EventChargeRefunded:
		if _, err := s.db.RecordChargeRefunded(ctx, ev.ID, ev.StripeType, ev.ReservationID, ev.PaymentIntentID, ev.AmountCents, now); err != nil {
			return err
		}
	case billing.EventDisputeCreated:
		opened, err := s.db.OpenStripeDispute(ctx, ev.ID, ev.StripeType, ev.ReservationID, ev.PaymentIntentID, ev.ChargeID, ev.DisputeID, ev.AmountCents, now)
		if err != nil {
			return err
		}
		if opened {
			log.Warn("chargeback: dispute opened, money recorded as returned to the buyer, provider payouts frozen", "dispute_id", ev.DisputeID)
		}
	case billing.EventDisputeClosed:
		closed, err := s.db.CloseStripeDispute(ctx, ev.ID, ev.StripeType, ev.DisputeID, ev.DisputeStatus, now)
		if err != nil {
			return err
		}
		if closed {
			log.Info("chargeback closed by the bank", "dispute_id", ev.DisputeID, "outcome", ev.DisputeStatus)
		}
	case billing.EventAccountUpdated:
		released, err := s.db.UpdatePayoutAccount(ctx, store.AccountUpdate{
			EventID: ev.ID, EventType: ev.StripeType, AccountID: ev.AccountID, DetailsSubmitted: ev.DetailsSubmitted,
			ChargesEnabled: ev.ChargesEnabled, PayoutsEnabled: ev.PayoutsEnabled, At: ev.Created,
		}, now)
		if err != nil {
			return err
		}
		if released > 0 {
			log.Info("payouts released after onboarding", "account_id", ev.AccountID, "released", released)
			s.runDueSettlements(ctx, now)
		}
	case billing.EventSetupCompleted:
		// The buyer's return page saves the card too; whichever comes
		// first saves it, the other (or a replay) finds it saved.
		m, err := s.SaveSetupCard(ctx, 0, ev.CheckoutID)
		switch code := market.ErrorCode(err); {
		case code == market.CodeConflict || code == market.CodeInvalid || code == market.CodeNotFound:
			log.Info("card setup not saved", "checkout_id", ev.CheckoutID, "reason", market.ErrorMessage(err))
		case err != nil:
			return err
		default:
			log.Info("card saved", "checkout_id", ev.CheckoutID, "user_id", m.UserID, "payment_method_id", m.ID)
		}
		_, err = s.db.MarkEventProcessed(ctx, ev.ID, ev.StripeType, now)
		return err
	default:
		_, err := s.db.MarkEventProcessed(ctx, ev.ID, ev.StripeType, now)
		return err
	}
	return nil
}

// recordPayment records that a reservation was paid — a payment event, or
// an off-session charge of a saved card (PayWithSavedMethod), the one path
// for both — and refunds at once what cannot be taken as its payment (a
// late payment, a mismatched one).
func (s *Service) recordPayment(ctx context.Context, log *slog.Logger, ev store.PaymentEvent, now time.Time) (store.PaymentOutcome, error) {
	outcome, err := s.db.RecordPayment(ctx, ev, now)
	if err != nil {
		return "", err
	}
	s.wakeAgents(ctx, ev.ReservationID) // keys to install at once (docs/agent.md)
	log.Info("payment recorded", "outcome", outcome, "amount_cents", int64(ev.Amount), "currency", ev.Currency, "payment_intent_id", ev.PaymentIntentID)
	switch outcome {
	case store.PaymentLate:
		s.refundLatePayments(ctx, now)
	case store.PaymentMismatched:
		log.Warn("payment does not match its checkout: refunded in full, reservation not confirmed by it", "payment_intent_id", ev.PaymentIntentID)
		s.refundPaymentExceptions(ctx, now)
	}
	return outcome, nil
}

// runDueSettlements runs every settlement step due now.
func (s *Service) runDueSettlements(ctx context.Context, now time.Time) {
	due, err := s.db.ListDueSettlements(ctx, now)
	if err != nil {
		s.log.Error("list due settlements", "err", err)
		return
	}
	for _, st := range due {
		s.runSettlement(ctx, st, now)
	}
}

package workflow

import (
	"context"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/metrics"
	"github.com/gpumarket/gpumarket/store"
)

// settleTick is the money part of the periodic work: buyer reports left
// unacknowledged past the deadline become disputes, completed reservations
// start settling, due settlement steps run (the bounded retrier), and late
// payments, mismatched payments and granted dispute credits are refunded.
// Every step's state is in the database, so a restart picks up where the
// last run stopped, and every processor call carries an idempotency key, so
// a repeated step never moves money twice.
func (s *Service) settleTick(ctx context.Context, now time.Time) {
	disputes, err := s.db.EscalateIncidents(ctx, now.Add(-IncidentAckDeadline), now)
	if err != nil {
		s.log.Error("background: escalate incidents", "err", err)
	}
	for _, d := range disputes {
		s.log.Warn("unacknowledged incident became a dispute", "reservation_id", d.ReservationID, "incident_id", d.IncidentID, "dispute_id", d.ID)
	}
	ids, err := s.db.ListSettleable(ctx)
	if err != nil {
		s.log.Error("background: list settleable", "err", err)
	}
	for _, id := range ids {
		st, err := s.db.StartSettlement(ctx, id, s.feeBP, now)
		if err != nil {
			s.log.Error("settlement not started", "reservation_id", id, "err", err)
			continue
		}
		s.log.Info("settlement started", "reservation_id", id, "refund_cents", int64(st.RefundCents), "state", st.State)
	}
	due, err := s.db.ListDueSettlements(ctx, now)
	if err != nil {
		s.log.Error("background: list due settlements", "err", err)
	}
	for _, st := range due {
		s.runSettlement(ctx, st, now)
	}
	s.refundLatePayments(ctx, now)
	s.refundPaymentExceptions(ctx, now)
	s.refundPendingDisputes(ctx)
}

// runSettlement makes the settlement's remaining money movements: the
// refund, then each provider's transfer, recording each as soon as the
// processor confirms it. A failed refund does not hold back the transfers
// (they move different money; the refund is retried on its own); a failed
// transfer stops the run. A payout of zero is never sent (the store
// records it as done). A failure is recorded once per run, with the time
// of the next attempt.
func (s *Service) runSettlement(ctx context.Context, st store.Settlement, now time.Time) {
	log := s.log.With("reservation_id", st.ReservationID)
	if st.State != store.SettlementPending {
		return
	}
	var failKind, failStep string
	var failErr error
	if !st.RefundDone {
		ref, err := s.pay.Refund(ctx, st.PaymentIntentID, st.RefundCents, market.EntryKey(st.ReservationID, market.EntryRefund, 0))
		switch {
		case err != nil:
			failKind, failStep, failErr = metrics.StepRefund, "refund", err
		default:
			if _, err := s.db.RecordSettlementRefund(ctx, st.ReservationID, ref.ID, now); err != nil {
				log.Error("settlement refund made but not recorded; will retry", "refund_id", ref.ID, "err", err)
				return
			}
			s.metrics.SettlementStep(metrics.StepRefund)
			log.Info("settlement refund made", "refund_id", ref.ID, "amount_cents", int64(st.RefundCents))
		}
	}
	for _, t := range st.Transfers {
		if t.State != store.TransferPending || t.Amount <= 0 {
			continue
		}
		tr, err := s.pay.Transfer(ctx, t.AccountID, t.Amount, market.TransferGroup(st.ReservationID),
			market.EntryKey(st.ReservationID, market.EntryTransfer, t.ProviderID))
		if err != nil {
			step := fmt.Sprintf("transfer to provider %d", t.ProviderID)
			if failErr != nil {
				step = failStep + "; " + step
				err = fmt.Errorf("%v; %w", failErr, err)
			}
			failKind, failStep, failErr = metrics.StepTransfer, step, err
			break
		}
		if _, err := s.db.RecordSettlementTransfer(ctx, st.ReservationID, t.ProviderID, tr.ID, now); err != nil {
			log.Error("settlement transfer made but not recorded; will retry", "transfer_id", tr.ID, "err", err)
			return
		}
		s.metrics.SettlementStep(metrics.StepTransfer)
		log.Info("settlement transfer made", "provider_id", t.ProviderID, "transfer_id", tr.ID, "amount_cents", int64(t.Amount))
	}
	if failErr != nil {
		s.settlementFailed(ctx, st, failKind, failStep, failErr, now)
	}
}

// settlementFailed records a failed step (kind is its metrics label, step
// names it for people): retried with exponential backoff while the error is
// retryable and attempts remain, else failed for admins.
func (s *Service) settlementFailed(ctx context.Context, st store.Settlement, kind, step string, err error, now time.Time) {
	attempts := st.Attempts + 1
	giveUp := attempts >= SettlementMaxAttempts || !billing.Retryable(err)
	s.metrics.SettlementFailure(kind, giveUp)
	next := now.Add(backoff(attempts))
	s.log.Error("settlement step failed", "reservation_id", st.ReservationID, "step", step, "attempt", attempts, "give_up", giveUp, "err", err)
	msg := fmt.Sprintf("%s: %v", step, err)
	if rerr := s.db.RecordSettlementFailure(ctx, st.ReservationID, msg, next, giveUp, now); rerr != nil {
		s.log.Error("record settlement failure", "reservation_id", st.ReservationID, "err", rerr)
	}
}

// RetrySettlement puts a failed settlement back to pending and runs it now
// (an admin's decision).
func (s *Service) RetrySettlement(ctx context.Context, reservationID int64) error {
	now := s.now()
	if err := s.db.RetrySettlement(ctx, reservationID, now); err != nil {
		return err
	}
	st, err := s.db.FindSettlement(ctx, reservationID)
	if err != nil {
		return err
	}
	s.runSettlement(ctx, st, now)
	return nil
}

// refundLatePayments refunds in full every payment that arrived after its
// reservation could no longer be confirmed, with the reservation's refund
// idempotency key; a failure is retried later with backoff.
func (s *Service) refundLatePayments(ctx context.Context, now time.Time) {
	due, err := s.db.ListDuePaymentRefunds(ctx, now)
	if err != nil {
		s.log.Error("background: list late payments", "err", err)
		return
	}
	for _, p := range due {
		ref, err := s.pay.Refund(ctx, p.PaymentIntentID, p.Amount, market.EntryKey(p.ReservationID, market.EntryRefund, 0))
		if err == nil {
			err = s.db.RecordPaymentRefund(ctx, p.ReservationID, ref.ID, now)
		}
		if err != nil {
			s.log.Error("late payment refund failed; will retry", "reservation_id", p.ReservationID, "attempt", p.Attempts+1, "err", err)
			if err := s.db.RecordPaymentRefundFailure(ctx, p.ReservationID, err.Error(), now.Add(backoff(p.Attempts+1)), now); err != nil {
				s.log.Error("record late refund failure", "reservation_id", p.ReservationID, "err", err)
			}
			continue
		}
		s.log.Info("late payment refunded in full", "reservation_id", p.ReservationID, "refund_id", ref.ID)
	}
}

// refundPaymentExceptions refunds in full every payment that did not match
// its reservation's checkout (wrong amount or currency, a second payment),
// each with its own idempotency key; a failure is retried with backoff.
func (s *Service) refundPaymentExceptions(ctx context.Context, now time.Time) {
	due, err := s.db.ListDuePaymentExceptions(ctx, now)
	if err != nil {
		s.log.Error("background: list payment exceptions", "err", err)
		return
	}
	for _, p := range due {
		ref, err := s.pay.Refund(ctx, p.PaymentIntentID, p.Amount, market.PaymentExceptionKey(p.PaymentIntentID, market.EntryRefund))
		if err == nil {
			err = s.db.RecordPaymentExceptionRefund(ctx, p.ID, ref.ID, now)
		}
		if err != nil {
			s.log.Error("mismatched payment refund failed; will retry", "payment_intent_id", p.PaymentIntentID, "attempt", p.Attempts+1, "err", err)
			if err := s.db.RecordPaymentExceptionFailure(ctx, p.ID, err.Error(), now.Add(backoff(p.Attempts+1)), now); err != nil {
				s.log.Error("record payment exception failure", "payment_intent_id", p.PaymentIntentID, "err", err)
			}
			continue
		}
		s.log.Info("mismatched payment refunded in full", "reservation_id", p.ReservationID, "payment_intent_id", p.PaymentIntentID, "refund_id", ref.ID)
	}
}

// refundPendingDisputes retries the processor refund of every granted
// dispute credit not yet refunded.
func (s *Service) refundPendingDisputes(ctx context.Context) {
	ds, err := s.db.ListPendingDisputeRefunds(ctx)
	if err != nil {
		s.log.Error("background: list pending dispute refunds", "err", err)
		return
	}
	for _, d := range ds {
		if err := s.RefundDispute(ctx, d.ID); err != nil {
			s.log.Error("dispute refund failed; will retry", "dispute_id", d.ID, "err", err)
		}
	}
}

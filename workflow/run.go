package workflow

import (
	"context"
	"time"

	"github.com/gpumarket/gpumarket/store"
)

// Run does the periodic work every interval until ctx ends, then returns
// (after the step under way finishes, so the process owner can close the
// database safely): Tick, and every few minutes a fresh matcher index so
// that changes made by other replicas are seen. Each step is a conditional
// update in the database, so several replicas may run it at once.
func (s *Service) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	lastReload, lastPrune := s.now(), time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// The step runs to its end even if ctx ends meanwhile: a processor
		// call made must be recorded before the process stops.
		step := context.WithoutCancel(ctx)
		now := s.now()
		s.Tick(step, now)
		if now.Sub(lastPrune) >= pruneEvery {
			s.Prune(step, now)
			lastPrune = now
		}
		if now.Sub(lastReload) >= indexReloadEvery {
			if err := s.ReloadIndex(step); err != nil {
				s.log.Error("background: reload index", "err", err)
				continue
			}
			lastReload = now
		}
	}
}

// Tick is one round of the periodic work at now: unpaid holds expire
// (freeing their capacity in the index), reservations move through their
// lifecycle, the agents' heartbeats are measured (measureTick), and the
// money workflow advances (settleTick).
func (s *Service) Tick(ctx context.Context, now time.Time) {
	expired, err := s.db.ExpireHolds(ctx, now)
	if err != nil {
		s.log.Error("background: expire holds", "err", err)
	}
	for _, r := range expired {
		s.releaseCommitments(r)
		s.expireCheckout(ctx, r.ID)
		s.log.Info("hold expired", "reservation_id", r.ID)
	}
	if _, err := s.db.AdvanceReservations(ctx, now); err != nil {
		s.log.Error("background: advance reservations", "err", err)
	}
	s.measureTick(ctx, now)
	s.settleTick(ctx, now)
}

// Prune deletes short-lived rows past their use: expired sessions and
// throttle records older than a day.
func (s *Service) Prune(ctx context.Context, now time.Time) {
	sessions, err := s.db.DeleteExpiredSessions(ctx, now)
	if err != nil {
		s.log.Error("background: prune sessions", "err", err)
	}
	hits, err := s.db.DeleteThrottleHitsBefore(ctx, now.Add(-throttleKeep))
	if err != nil {
		s.log.Error("background: prune throttle records", "err", err)
	}
	if sessions > 0 || hits > 0 {
		s.log.Info("pruned", "sessions", sessions, "throttle_records", hits)
	}
}

// expireCheckout closes the open checkout of a reservation that can no
// longer be paid (its hold ended, or it was cancelled), so the buyer cannot
// pay it by mistake. Stripe will not set a checkout's own expiry under 30
// minutes away, which a 30-minute hold always is, so this is how a checkout
// ends with its hold. If it fails, a payment that still arrives is a late
// payment and is refunded in full.
func (s *Service) expireCheckout(ctx context.Context, reservationID int64) {
	p, err := s.db.FindPayment(ctx, reservationID)
	if err != nil || p.CheckoutID == "" || (p.Status != store.PaymentOpen && p.Status != store.PaymentFailed) {
		return
	}
	if err := s.pay.ExpireCheckout(ctx, p.CheckoutID); err != nil {
		s.log.Warn("checkout not expired; a late payment will be refunded", "reservation_id", reservationID, "checkout_id", p.CheckoutID, "err", err)
	}
}

package workflow

import (
	"context"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// BackgroundLease is the lease (store.TakeLease) under which one replica
// does the background work.
const BackgroundLease = "background"

// LeaseTTL is how long the background lease lasts without renewal when
// the loop runs every tick: three ticks, at least 5 s. When the holder
// dies another replica takes it over within LeaseTTL plus one renewal.
func LeaseTTL(tick time.Duration) time.Duration { return max(3*tick, 5*time.Second) }

// leaseRenewEvery is how often the holder renews the lease: every tick,
// and at least three times per LeaseTTL, so one late renewal does not lose
// it.
func leaseRenewEvery(tick time.Duration) time.Duration { return min(tick, LeaseTTL(tick)/3) }

// Run does the periodic work every interval until ctx ends, then returns
// (after the step under way finishes, so the process owner can close the
// database safely). The replica holding the background lease runs Tick and
// the hourly Prune, so that work runs once across replicas. The lease is
// renewed on its own timer (keepLease), not between ticks, so a long tick
// does not let it lapse; and it is a fencing token: the tick runs under
// the generation it was taken with (store.WithFence), so if the lease is
// lost meanwhile — this process paused past its lease, its renewals cut
// off from the database — the tick's remaining writes are refused and
// another replica's work is not done twice. (Each step is also a
// conditional update, and every money movement has its idempotency key.)
// Every replica reloads its matcher index in full every few minutes, a
// safety net under the change feed (Follow). On the way out the lease is
// released, so another replica takes over at its next renewal.
//
// Every replica also records its own up-time, at its start and every
// market.ServerBeatInterval (store.RecordServerBeat): a node's silence is
// measured as a host failure only while the market was up (docs/agent.md).
func (s *Service) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	beat := time.NewTicker(market.ServerBeatInterval)
	defer beat.Stop()
	leaseCtx, stopLease := context.WithCancel(ctx)
	renewing := make(chan struct{})
	go func() { defer close(renewing); s.keepLease(leaseCtx, every) }()
	defer func() { // after the last tick: no tick runs under a released lease
		stopLease()
		<-renewing
		s.releaseLease()
	}()
	defer s.FlushHeartbeats(context.WithoutCancel(ctx))
	defer s.FlushTokenUses(context.WithoutCancel(ctx))
	started := s.now()
	s.serverBeat(ctx, started, started)
	lastReload, lastPrune := s.now(), time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-beat.C:
			s.serverBeat(ctx, started, s.now())
			continue
		case <-t.C:
		}
		// The step runs to its end even if ctx ends meanwhile: a processor
		// call made must be recorded before the process stops.
		step := context.WithoutCancel(ctx)
		s.FlushHeartbeats(step)
		s.FlushTokenUses(step)
		now := s.now()
		if l := s.lease.Load(); l != nil {
			fenced := store.WithFence(step, *l, s.now)
			s.Tick(fenced, now)
			if now.Sub(lastPrune) >= pruneEvery {
				s.Prune(fenced, now)
				lastPrune = now
			}
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

// keepLease takes the background lease, or renews it, at once and then
// every leaseRenewEvery(tick) until ctx ends.
func (s *Service) keepLease(ctx context.Context, tick time.Duration) {
	t := time.NewTicker(leaseRenewEvery(tick))
	defer t.Stop()
	for {
		s.takeLease(ctx, s.now(), LeaseTTL(tick))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// serverBeat records that this replica, started at started, is up at now.
func (s *Service) serverBeat(ctx context.Context, started, now time.Time) {
	if err := s.db.RecordServerBeat(context.WithoutCancel(ctx), s.holder, started, now); err != nil {
		s.log.Error("background: record server up-time", "err", err)
	}
}

// HoldsLease reports whether this replica held the background lease at its
// last renewal.
func (s *Service) HoldsLease() bool { return s.lease.Load() != nil }

// takeLease takes or renews the background lease and notes it (s.lease);
// a failure to reach the database counts as not holding it (another
// replica may take it over meanwhile).
func (s *Service) takeLease(ctx context.Context, now time.Time, ttl time.Duration) {
	l, ok, err := s.db.TakeLease(context.WithoutCancel(ctx), BackgroundLease, s.holder, now, ttl)
	if err != nil {
		s.log.Error("background: take lease", "err", err)
		ok = false
	}
	var held *store.Lease
	if ok {
		held = &l
	}
	was := s.lease.Swap(held)
	switch {
	case ok && (was == nil || was.Generation != l.Generation):
		s.log.Info("background lease taken: this replica runs the background work", "holder", s.holder, "generation", l.Generation)
	case !ok && was != nil:
		s.log.Warn("background lease lost: another replica runs the background work", "holder", s.holder, "generation", was.Generation)
	}
}

func (s *Service) releaseLease() {
	if s.lease.Swap(nil) == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.db.ReleaseLease(ctx, BackgroundLease, s.holder); err != nil {
		s.log.Warn("background lease not released; another replica takes over when it expires", "err", err)
	}
}

// Tick is one round of the periodic work at now: unpaid holds expire
// (freeing their capacity in the index), standing orders past their
// fill-by date expire, metered rentals are metered (meteredTick: draws,
// stops, their capacity held ahead), reservations move through their lifecycle, the
// agents' heartbeats are measured (measureTick), the spot market clears
// the offer-hours due (spotTick), the money workflow advances
// (settleTick), and due mail is sent (mailTick).
func (s *Service) Tick(ctx context.Context, now time.Time) {
	expired, err := s.db.ExpireHolds(ctx, now)
	if err != nil {
		s.log.Error("background: expire holds", "err", err)
	}
	for _, r := range expired {
		s.expireCheckout(ctx, r.ID)
		s.log.Info("hold expired", "reservation_id", r.ID)
	}
	s.meteredTick(ctx, now) // metered rentals: clock, draws, stops, capacity ahead (workflow/metered.go)
	if _, err := s.db.AdvanceReservations(ctx, now); err != nil {
		s.log.Error("background: advance reservations", "err", err)
	}
	s.expireOrders(ctx, now)
	s.measureTick(ctx, now)
	s.replaceTick(ctx, now) // host failures measured: replacements (workflow/replace.go)
	s.spotTick(ctx, now)    // spot market: clear the offer-hours due (workflow/spot.go)
	s.chargeTick(ctx, now)  // saved-card charges left pending by a crash or a processor failure (workflow/charge.go)
	s.settleTick(ctx, now)
	s.resaleMoneyTick(ctx, now) // resale: sellers' credits, unsold payments' refunds
	s.mailTick(ctx, now)
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

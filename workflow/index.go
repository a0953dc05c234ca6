package workflow

import (
	"context"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// Index returns the current matcher index.
func (s *Service) Index() *market.Index { return s.idx.Load() }

// ReloadIndex rebuilds the matcher's index from the database: every listed
// offer and every commitment that holds capacity, with every provider's
// reliability score (providers absent have none yet and score the prior).
func (s *Service) ReloadIndex(ctx context.Context) error {
	// Offers followed while the database is read are followed again once
	// the new index is in place: its snapshot may predate their change.
	s.follow.Lock()
	s.reloads++
	s.follow.Unlock()
	var replay []int64
	defer func() {
		if len(replay) > 0 {
			s.followOffers(ctx, replay)
		}
	}()
	defer func() {
		s.follow.Lock()
		if s.reloads--; s.reloads == 0 {
			replay, s.replay = s.replay, nil
		}
		s.follow.Unlock()
	}()
	now := s.now()
	listings, err := s.db.ListAllListedOffers(ctx, now)
	if err != nil {
		return err
	}
	commitments, err := s.db.ListAllCommitments(ctx, now)
	if err != nil {
		return err
	}
	records, err := s.db.ProviderRecords(ctx, now)
	if err != nil {
		return err
	}
	rates, err := s.db.SpotInterruptionRates(ctx, now)
	if err != nil {
		return err
	}
	spot, err := s.db.SpotQuotePrices(ctx, now, 0)
	if err != nil {
		return err
	}
	scores := make(map[int64]market.Reliability, len(records))
	for id, r := range records {
		scores[id] = market.ReliabilityOf(r)
	}
	cands := make([]market.Candidate, 0, len(listings))
	for _, l := range listings {
		cands = append(cands, candidate(l.Offer, records[l.Offer.ProviderID], rates[l.Offer.ID], spot[l.Offer.ID]))
	}
	idx := market.NewIndex()
	if err := idx.Load(cands, commitments); err != nil {
		return fmt.Errorf("workflow: load matcher index: %w", err)
	}
	s.idx.Store(idx)
	s.scores.Store(&scores)
	s.loadedAt.Store(now.UnixNano())
	offers := make([]market.Offer, 0, len(listings))
	for _, l := range listings {
		offers = append(offers, l.Offer)
	}
	s.carbon.reset(offers)
	return nil
}

// IndexAge is the time since the index was last loaded in full from the
// database (ReloadIndex); the changes made through this Service in
// between are applied to it as they happen.
func (s *Service) IndexAge() time.Duration {
	return s.now().Sub(time.Unix(0, s.loadedAt.Load()))
}

// IndexMaxAge is how old the index may grow before a replica whose
// background loop runs every tick counts as unhealthy: three missed full
// reloads (Run reloads every indexReloadEvery, checked on each tick).
func IndexMaxAge(tick time.Duration) time.Duration {
	return 3 * max(tick, indexReloadEvery)
}

// Reliability returns a provider's reliability score and what it rests on
// (measured by agent or self-reported) as of the last index load, or the
// prior for a provider with no record.
func (s *Service) Reliability(providerID int64) market.Reliability {
	if m := s.scores.Load(); m != nil {
		if v, ok := (*m)[providerID]; ok {
			return v
		}
	}
	return market.PriorReliability()
}

// candidate is an offer as the matcher sees it, with its provider's
// reliability score from their record and the offer's observed spot
// preemption rate (store.SpotInterruptionRates; 0 for unknown); its
// interruptible capacity is priced at its latest spot clearing, between
// the floor and the on-demand price (market.SpotQuotePrice).
func candidate(o market.Offer, rec market.ProviderRecord, interruptionPPM int, lastSpot market.Cents) market.Candidate {
	if o.Interruptible {
		o.InterruptibleCentsPerDH = market.SpotQuotePrice(o.InterruptibleCentsPerDH, o.PriceCentsPerDeviceHour, lastSpot)
	}
	return market.Candidate{Offer: o, ReliabilityBP: market.ReliabilityBP(rec), InterruptionPPMPerHour: interruptionPPM}
}

// RefreshOffer reads one offer and its commitments again into the index.
// No write needs it: the store publishes every committed change to the
// offers (store.DB.OnOffersChanged), and the index has followed it before
// the write returns (heardCommit).
func (s *Service) RefreshOffer(ctx context.Context, offerID int64) {
	if err := s.followOffers(ctx, []int64{offerID}); err != nil {
		s.log.Warn("index: offer not refreshed", "offer_id", offerID, "err", err)
	}
}

// heardCommit makes the index follow the offers a write transaction of
// this process changed (store.DB.OnOffersChanged): they join the feed's
// queue, as the other replicas' changes do, and are applied at once, on
// the committing goroutine, so the write's caller — and anyone after it —
// finds the index in step when the write returns. A batch whose read
// fails stays queued for the next commit, or for Follow's applier.
func (s *Service) heardCommit(ch store.OfferChanges) {
	s.agent.cache.dropOffers(ch.Listings)
	s.agent.cache.dropOffers(ch.Commitments)
	for _, id := range ch.Listings {
		s.feed.add(id)
	}
	for _, id := range ch.Commitments {
		s.feed.addCommitments(id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.applyPending(ctx); err != nil {
		s.log.Warn("index: committed changes not read; they stay queued", "offers", len(ch.Listings)+len(ch.Commitments), "err", err)
	}
}

// applyPending applies every change pending in the feed as one batch:
// the offers whose listing changed read again in full (followOffers), the
// others' commitments alone (followCommitments). One batch is applied at
// a time: a caller waits for the batch under way, which may hold its
// changes, then applies what is left, so when it returns every change
// queued before it was called is applied (or queued again, with the error
// returned).
func (s *Service) applyPending(ctx context.Context) error {
	s.applying.Lock()
	defer s.applying.Unlock()
	listings, commitments := s.feed.take()
	if len(listings) == 0 && len(commitments) == 0 {
		return nil
	}
	err := s.followOffers(ctx, listings)
	if err == nil {
		err = s.followCommitments(ctx, commitments)
	}
	if err != nil {
		s.feed.done(append(listings, commitments...))
		return err
	}
	s.feed.done(nil)
	return nil
}

// Follow keeps the index in step with changes committed by other
// replicas until ctx ends: the store's offer change feed (PostgreSQL's
// LISTEN/NOTIFY) names each changed offer. This process's own commits are
// heard sooner, in-process, on both engines (heardCommit); on SQLite,
// where this process is the only writer, they are all there is, and
// Follow only retries a batch whose read failed. The feed is coalesced
// (feedQueue) — one queue for both: while one batch is applied the next
// gathers, each offer once however often it changed, and a batch is read
// again in one read transaction (followOffers). Each time the feed
// (re)connects the index is reloaded in full, since changes made while it
// was down were not heard; until that reload is done FeedLag reports the
// feed down. The full reload in Run stays as a safety net.
func (s *Service) Follow(ctx context.Context) {
	applied := make(chan struct{})
	go func() {
		defer close(applied)
		s.applyFeed(ctx)
	}()
	defer func() { <-applied }()
	if !s.db.Postgres() {
		<-ctx.Done() // no other replica to hear: the applier only retries
		return
	}
	s.db.FollowOffers(ctx, func(offerID int64, own bool) {
		if !own { // this replica's own commits were applied as they committed (heardCommit)
			s.feed.add(offerID)
		}
		s.agent.cache.dropOffers([]int64{offerID})
		s.agent.hub.wake(offerID) // the agents' long-polls on this replica read their assignments again
	},
		func() error {
			if err := s.ReloadIndex(ctx); err != nil {
				return err
			}
			s.agent.cache.dropAll()
			if down := s.feed.joinedAfterReload(); ctx.Err() == nil {
				s.log.Info("index: change feed joined; index reloaded", "down_for", down.Round(time.Millisecond).String())
			}
			s.agent.hub.wakeAll()
			s.orders.noteAll() // changes made while the feed was down were not heard: re-match every open order
			return nil
		},
		func(err error) {
			s.agent.cache.dropAll()
			if s.feed.lost() && ctx.Err() == nil {
				s.log.Warn("index: change feed lost; reconnecting", "err", err)
			}
		})
	s.feed.lost()
}

// FeedLag is how far this replica's index is behind the change feed: the
// age of the oldest change heard and not yet applied (0 when none), or,
// while the feed is down (before it first joins, after its connection is
// lost, until the index is reloaded on reconnecting), the time since it
// went down, with joined false. On SQLite there is no feed to lag: 0, true.
func (s *Service) FeedLag() (lag time.Duration, joined bool) {
	if !s.db.Postgres() {
		return 0, true
	}
	return s.feed.lag()
}

// feedRetryAfter is how long the applier waits before reading a batch
// again after its read failed.
const feedRetryAfter = 250 * time.Millisecond

// applyFeed applies the feed's pending changes, a batch at a time, until
// ctx ends.
func (s *Service) applyFeed(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.feed.wake:
		}
		if err := s.applyPending(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("index: changed offers not read; retrying", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(feedRetryAfter):
			}
		}
	}
}

// followOffers reads the offers ids names and their commitments again into
// the index, in one read transaction (store.FindOffersForIndex); an offer
// gone or no longer listed leaves the index. Applying it twice, or after
// this replica's own update, changes nothing; s.follow makes the reads and
// the updates of the index happen in the same order, so an older read
// never overwrites a newer one.
func (s *Service) followOffers(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	s.follow.Lock()
	defer s.follow.Unlock()
	if s.reloads > 0 {
		s.replay = append(s.replay, ids...)
	}
	now := s.now()
	found, err := s.db.FindOffersForIndex(ctx, ids, now)
	if err != nil {
		return err
	}
	// The spot figures are read once per batch, for one offer or all.
	var only int64
	if len(ids) == 1 {
		only = ids[0]
	}
	var rates map[int64]int
	if only != 0 {
		ppm, err := s.db.SpotInterruptionRate(ctx, only, now)
		if err != nil {
			s.log.Warn("index: spot preemption rate", "offer_id", only, "err", err)
		}
		rates = map[int64]int{only: ppm}
	} else if rates, err = s.db.SpotInterruptionRates(ctx, now); err != nil {
		s.log.Warn("index: spot preemption rates", "err", err)
	}
	spot, err := s.db.SpotQuotePrices(ctx, now, only)
	if err != nil {
		s.log.Warn("index: spot quote prices", "err", err)
	}
	idx := s.Index()
	for _, id := range ids {
		o, ok := found[id]
		switch {
		case !ok || o.Listing.ProviderSuspended:
			idx.Remove(id)
			s.carbon.forget(id)
		default:
			s.carbon.noteOffer(o.Listing.Offer)
			if err := idx.Upsert(candidate(o.Listing.Offer, o.Record, rates[id], spot[id])); err != nil {
				s.log.Warn("index: offer not indexed", "offer_id", id, "err", err)
			}
		}
		idx.SetCommitments(id, o.Commitments)
		s.orders.note(id) // standing orders re-match on the change
	}
	return nil
}

// followCommitments reads the commitments of the offers ids names again
// into the index, in one read transaction: a booking, a cancellation, an
// expiry changes nothing else of an offer (an interruptible piece's does,
// and comes through followOffers). Like followOffers it runs under
// s.follow, so reads and updates happen in the same order.
func (s *Service) followCommitments(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	s.follow.Lock()
	defer s.follow.Unlock()
	if s.reloads > 0 {
		s.replay = append(s.replay, ids...)
	}
	cs, err := s.db.ListCommitmentsOfOffers(ctx, ids, s.now())
	if err != nil {
		return err
	}
	idx := s.Index()
	for _, id := range ids {
		idx.SetCommitments(id, cs[id])
		s.orders.note(id) // capacity freed (or taken): standing orders re-match
	}
	return nil
}

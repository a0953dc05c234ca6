package workflow

import (
	"context"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/market"
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

// RefreshOffer makes the index follow a change to one offer (created,
// edited, reviewed, paused, resumed, withdrawn, its provider suspended or
// reinstated).
func (s *Service) RefreshOffer(ctx context.Context, offerID int64) {
	s.follow.Lock()
	defer s.follow.Unlock()
	s.refreshOffer(ctx, offerID)
}

// refreshOffer is RefreshOffer; callers hold s.follow.
func (s *Service) refreshOffer(ctx context.Context, offerID int64) {
	if s.reloads > 0 {
		s.replay = append(s.replay, offerID)
	}
	defer s.orders.note(offerID) // standing orders re-match on the change
	l, err := s.db.FindOfferByID(ctx, offerID)
	if err != nil {
		s.log.Warn("index: offer not refreshed", "offer_id", offerID, "err", err)
		s.Index().Remove(offerID)
		s.carbon.forget(offerID)
		return
	}
	s.carbon.noteOffer(l.Offer)
	if l.ProviderSuspended {
		s.Index().Remove(offerID)
		return
	}
	rec, err := s.db.ProviderRecord(ctx, l.Offer.ProviderID, s.now())
	if err != nil {
		s.log.Warn("index: provider record", "offer_id", offerID, "err", err)
	}
	ppm, err := s.db.SpotInterruptionRate(ctx, offerID, s.now())
	if err != nil {
		s.log.Warn("index: spot preemption rate", "offer_id", offerID, "err", err)
	}
	spot, err := s.db.SpotQuotePrices(ctx, s.now(), offerID)
	if err != nil {
		s.log.Warn("index: spot quote price", "offer_id", offerID, "err", err)
	}
	if err := s.Index().Upsert(candidate(l.Offer, rec, ppm, spot[offerID])); err != nil {
		s.log.Warn("index: offer not indexed", "offer_id", offerID, "err", err)
	}
}

// RemoveOffer takes an offer out of the index at once.
func (s *Service) RemoveOffer(offerID int64) { s.Index().Remove(offerID) }

// holdCommitments and releaseCommitments make the index follow a
// reservation's pieces taking or giving back capacity: each of its offers'
// commitments is read again from the database (followCommitments) rather
// than added or removed in place, so a change also heard through the feed,
// or read by a full reload under way, is never counted twice or lost.
func (s *Service) holdCommitments(r market.Reservation)    { s.followCommitmentsOf(r) }
func (s *Service) releaseCommitments(r market.Reservation) { s.followCommitmentsOf(r) }

func (s *Service) followCommitmentsOf(r market.Reservation) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	seen := map[int64]bool{}
	for _, p := range r.Pieces {
		if !seen[p.OfferID] {
			seen[p.OfferID] = true
			s.follow.Lock()
			s.followCommitments(ctx, p.OfferID)
			s.follow.Unlock()
		}
	}
}

// Follow keeps the index in step with changes committed by other
// replicas until ctx ends: the store's offer change feed (PostgreSQL's
// LISTEN/NOTIFY; nothing on SQLite, where this process is the only writer
// and updates the index as it writes) names each changed offer. The feed
// is coalesced (feedQueue): while one batch is applied the next gathers,
// each offer once however often it changed, and a batch is read again in
// one read transaction (followOffers). Each time the feed (re)connects the
// index is reloaded in full, since changes made while it was down were not
// heard; until that reload is done FeedLag reports the feed down. The full
// reload in Run stays as a safety net.
func (s *Service) Follow(ctx context.Context) {
	if !s.db.Postgres() {
		return
	}
	applied := make(chan struct{})
	go func() {
		defer close(applied)
		s.applyFeed(ctx)
	}()
	defer func() { <-applied }()
	s.db.FollowOffers(ctx, func(offerID int64) {
		s.feed.add(offerID)
		s.agent.hub.wake(offerID) // the agents' long-polls on this replica read their assignments again
	},
		func() error {
			if err := s.ReloadIndex(ctx); err != nil {
				return err
			}
			s.feed.joinedAfterReload()
			s.agent.hub.wakeAll()
			s.orders.noteAll() // changes made while the feed was down were not heard: re-match every open order
			return nil
		},
		func(err error) {
			s.feed.lost()
			if ctx.Err() == nil {
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
		ids := s.feed.take()
		if len(ids) == 0 {
			continue
		}
		if err := s.followOffers(ctx, ids); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("index: changed offers not read; retrying", "offers", len(ids), "err", err)
			s.feed.done(ids)
			select {
			case <-ctx.Done():
				return
			case <-time.After(feedRetryAfter):
			}
			continue
		}
		s.feed.done(nil)
	}
}

// followOffers reads the offers ids names and their commitments again into
// the index, in one read transaction (store.FindOffersForIndex); an offer
// gone or no longer listed leaves the index. Applying it twice, or after
// this replica's own update, changes nothing; s.follow makes the reads and
// the updates of the index happen in the same order, so an older read
// never overwrites a newer one.
func (s *Service) followOffers(ctx context.Context, ids []int64) error {
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

// followCommitments reads an offer's commitments again into the index.
// Callers hold s.follow, so reads and updates happen in the same order.
func (s *Service) followCommitments(ctx context.Context, offerID int64) {
	if s.reloads > 0 {
		s.replay = append(s.replay, offerID)
	}
	cs, err := s.db.ListCommitmentsOfOffers(ctx, []int64{offerID}, s.now())
	if err != nil {
		s.log.Warn("index: commitments not refreshed", "offer_id", offerID, "err", err)
		return
	}
	s.Index().SetCommitments(offerID, cs[offerID])
	s.orders.note(offerID) // capacity freed (or taken): standing orders re-match
}

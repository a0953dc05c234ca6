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
	scores := make(map[int64]market.Reliability, len(records))
	for id, r := range records {
		scores[id] = market.ReliabilityOf(r)
	}
	cands := make([]market.Candidate, 0, len(listings))
	for _, l := range listings {
		cands = append(cands, candidate(l.Offer, records[l.Offer.ProviderID]))
	}
	idx := market.NewIndex()
	if err := idx.Load(cands, commitments); err != nil {
		return fmt.Errorf("workflow: load matcher index: %w", err)
	}
	s.idx.Store(idx)
	s.scores.Store(&scores)
	s.loadedAt.Store(now.UnixNano())
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
// reliability score from their record.
func candidate(o market.Offer, rec market.ProviderRecord) market.Candidate {
	return market.Candidate{Offer: o, ReliabilityBP: market.ReliabilityBP(rec)}
}

// RefreshOffer makes the index follow a change to one offer (created,
// edited, reviewed, paused, resumed, withdrawn, its provider suspended or
// reinstated).
func (s *Service) RefreshOffer(ctx context.Context, offerID int64) {
	l, err := s.db.FindOfferByID(ctx, offerID)
	if err != nil {
		s.log.Warn("index: offer not refreshed", "offer_id", offerID, "err", err)
		s.Index().Remove(offerID)
		return
	}
	if l.ProviderSuspended {
		s.Index().Remove(offerID)
		return
	}
	rec, err := s.db.ProviderRecord(ctx, l.Offer.ProviderID, s.now())
	if err != nil {
		s.log.Warn("index: provider record", "offer_id", offerID, "err", err)
	}
	if err := s.Index().Upsert(candidate(l.Offer, rec)); err != nil {
		s.log.Warn("index: offer not indexed", "offer_id", offerID, "err", err)
	}
}

// RemoveOffer takes an offer out of the index at once.
func (s *Service) RemoveOffer(offerID int64) { s.Index().Remove(offerID) }

// holdCommitments adds a reservation's pieces to the index.
func (s *Service) holdCommitments(r market.Reservation) {
	for _, p := range r.Pieces {
		s.Index().AddCommitment(pieceCommitment(p))
	}
}

// releaseCommitments removes a reservation's pieces from the index.
func (s *Service) releaseCommitments(r market.Reservation) {
	for _, p := range r.Pieces {
		s.Index().RemoveCommitment(pieceCommitment(p))
	}
}

func pieceCommitment(p market.ReservationPiece) market.Commitment {
	c := p.Commitment()
	c.ID = p.ID
	return c
}

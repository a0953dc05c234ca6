package web

import (
	"context"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// loadIndex builds the matcher's in-memory index from the database: every
// listed offer and every commitment that holds capacity. The index only
// speeds up the search; the store re-checks capacity inside the booking
// transaction, so a stale index can cost a retry, never a double booking.
// It also returns every provider's reliability score (providers absent
// have none yet and score the prior), which pages show.
func loadIndex(ctx context.Context, db *store.DB, now time.Time) (*market.Index, map[int64]int, error) {
	listings, err := db.ListAllListedOffers(ctx, now)
	if err != nil {
		return nil, nil, err
	}
	commitments, err := db.ListAllCommitments(ctx, now)
	if err != nil {
		return nil, nil, err
	}
	records, err := db.ProviderRecords(ctx, now)
	if err != nil {
		return nil, nil, err
	}
	scores := make(map[int64]int, len(records))
	for id, r := range records {
		scores[id] = market.ReliabilityBP(r)
	}
	cands := make([]market.Candidate, 0, len(listings))
	for _, l := range listings {
		cands = append(cands, candidate(l.Offer, records[l.Offer.ProviderID]))
	}
	idx := market.NewIndex()
	if err := idx.Load(cands, commitments); err != nil {
		return nil, nil, fmt.Errorf("web: load matcher index: %w", err)
	}
	return idx, scores, nil
}

// reliability returns a provider's reliability score as of the last index
// load (at most indexReloadEvery old), or the prior for a provider with no
// record.
func (h *Handler) reliability(providerID int64) int {
	if m := h.scores.Load(); m != nil {
		if s, ok := (*m)[providerID]; ok {
			return s
		}
	}
	return market.DefaultReliabilityBP
}

// candidate is an offer as the matcher sees it, with its provider's
// reliability score from their record (a provider with no record scores
// the prior, market.DefaultReliabilityBP).
func candidate(o market.Offer, rec market.ProviderRecord) market.Candidate {
	return market.Candidate{Offer: o, ReliabilityBP: market.ReliabilityBP(rec)}
}

// refreshOffer makes the index follow a change to one offer (created,
// edited, reviewed, paused, resumed, withdrawn).
func (h *Handler) refreshOffer(ctx context.Context, offerID int64) {
	l, err := h.db.FindOfferByID(ctx, offerID)
	if err != nil {
		h.log.Warn("index: offer not refreshed", "offer_id", offerID, "err", err)
		h.index().Remove(offerID)
		return
	}
	if l.ProviderSuspended {
		h.index().Remove(offerID)
		return
	}
	rec, err := h.db.ProviderRecord(ctx, l.Offer.ProviderID, h.now())
	if err != nil {
		h.log.Warn("index: provider record", "offer_id", offerID, "err", err)
	}
	if err := h.index().Upsert(candidate(l.Offer, rec)); err != nil {
		h.log.Warn("index: offer not indexed", "offer_id", offerID, "err", err)
	}
}

// index returns the current matcher index.
func (h *Handler) index() *market.Index {
	return h.idx.Load()
}

// releaseCommitments removes a reservation's pieces from the index.
func (h *Handler) releaseCommitments(r market.Reservation) {
	for _, p := range r.Pieces {
		h.index().RemoveCommitment(pieceCommitment(p))
	}
}

func pieceCommitment(p market.ReservationPiece) market.Commitment {
	c := p.Commitment()
	c.ID = p.ID
	return c
}

// RunBackground does the periodic work until ctx ends: it expires unpaid
// holds (freeing their capacity), moves reservations through their
// lifecycle, settles completed ones (billingTick), and every few minutes rebuilds the index from the database so
// that bookings made by other replicas are seen. Each step is a conditional
// update in the database, so several replicas may run it at once.
func (h *Handler) RunBackground(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	lastReload := h.now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := h.now()
		expired, err := h.db.ExpireHolds(ctx, now)
		if err != nil {
			h.log.Error("background: expire holds", "err", err)
		}
		for _, r := range expired {
			h.releaseCommitments(r)
			h.log.Info("hold expired", "reservation_id", r.ID)
		}
		if _, err := h.db.AdvanceReservations(ctx, now); err != nil {
			h.log.Error("background: advance reservations", "err", err)
		}
		h.billingTick(ctx, now)
		if now.Sub(lastReload) >= indexReloadEvery {
			idx, scores, err := loadIndex(ctx, h.db, now)
			if err != nil {
				h.log.Error("background: reload index", "err", err)
				continue
			}
			h.idx.Store(idx)
			h.scores.Store(&scores)
			lastReload = now
		}
	}
}

// indexReloadEvery bounds how stale the index can be for changes made by
// another replica.
const indexReloadEvery = 5 * time.Minute

package workflow

import (
	"context"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// CreateOffer lists a provider's new offer: stored pending review, then
// approved at once when moderation allows it (moderate). It reports
// whether the offer was approved.
func (s *Service) CreateOffer(ctx context.Context, o market.Offer) (market.Offer, bool, error) {
	created, err := s.db.CreateOffer(ctx, o, s.now())
	if err != nil {
		return market.Offer{}, false, err
	}
	s.log.Info("offer created", "offer_id", created.ID, "provider_id", created.ProviderID)
	approved := s.moderate(ctx, created)
	if approved {
		created.Review = market.ReviewApproved
	}
	return created, approved, nil
}

// EditOutcome is where a provider's edit left their offer.
type EditOutcome int

// Edit outcomes.
const (
	// EditInReview: the edit of an offer not listed yet waits for an
	// admin; the offer is out of the matcher until it is approved.
	EditInReview EditOutcome = iota
	// EditListed: a change that cannot mislead (market.EditNeedsReview) —
	// listed at once, audited.
	EditListed
	// EditApproved: a claim change approved at once by moderation.
	EditApproved
	// EditHeld: a claim change to a listed offer waits for an admin while
	// the listed version stays on the market.
	EditHeld
)

// UpdateOffer saves a provider's edit of their offer: a lower price or a
// longer window applies at once; a claim change to a listed offer is held
// for review while the listed version stays on the market; an offer not
// listed yet goes back to review. Moderation may approve a claim change
// at once.
func (s *Service) UpdateOffer(ctx context.Context, providerID int64, o market.Offer) (market.Offer, EditOutcome, error) {
	updated, held, err := s.db.UpdateOffer(ctx, providerID, o, s.now())
	if err != nil {
		return market.Offer{}, EditInReview, err
	}
	s.log.Info("offer updated", "offer_id", updated.ID, "provider_id", providerID, "review", updated.Review, "held", held)
	if !held && updated.Review == market.ReviewApproved {
		return updated, EditListed, nil
	}
	if s.moderate(ctx, updated) {
		updated.Review = market.ReviewApproved
		return updated, EditApproved, nil
	}
	if held {
		return updated, EditHeld, nil
	}
	return updated, EditInReview, nil
}

// SetOfferState pauses, resumes or withdraws a provider's offer
// (market.ChangeOfferState).
func (s *Service) SetOfferState(ctx context.Context, providerID, offerID int64, state market.OfferState) error {
	if err := s.db.SetOfferState(ctx, providerID, offerID, state, s.now()); err != nil {
		return err
	}
	return nil
}

// moderate runs after a provider creates or edits an offer: when the
// provider has a clean track record and the offer raises no red flag, it
// is approved at once (recorded in the audit trail with the system as the
// actor) and indexed; otherwise it waits in the review queue. A failure
// here only leaves the offer in the queue, so it is logged, not returned.
func (s *Service) moderate(ctx context.Context, o market.Offer) bool {
	now := s.now()
	rec, err := s.db.ProviderRecord(ctx, o.ProviderID, now)
	if err != nil {
		s.log.Warn("moderation: provider record", "offer_id", o.ID, "err", err)
		return false
	}
	if !rec.CleanTrackRecord() {
		return false
	}
	flags, err := s.RedFlags(ctx, []market.Offer{o}, map[int64]market.ProviderRecord{o.ProviderID: rec})
	if err != nil {
		s.log.Warn("moderation: red flags", "offer_id", o.ID, "err", err)
		return false
	}
	if !market.AutoApprove(rec, flags[o.ID]) {
		return false
	}
	ok, err := s.db.AutoApproveOffer(ctx, o.ID, now)
	if err != nil {
		s.log.Warn("moderation: auto-approve", "offer_id", o.ID, "err", err)
		return false
	}
	if ok {
		s.log.Info("offer auto-approved", "offer_id", o.ID, "provider_id", o.ProviderID)
	}
	return ok
}

// RedFlags are what moderation sees in each offer (market.RedFlags), given
// their providers' records: the prices of the other listed offers of the
// same model and the hosts whose measured hardware differs from the offer.
func (s *Service) RedFlags(ctx context.Context, offers []market.Offer, records map[int64]market.ProviderRecord) (map[int64][]market.RedFlag, error) {
	model := "" // every model's prices, unless one offer's are enough
	if len(offers) == 1 {
		model = offers[0].AcceleratorID
	}
	prices, err := s.db.ListedPrices(ctx, model, s.now())
	if err != nil {
		return nil, err
	}
	differs, err := s.db.ListHardwareDiffers(ctx)
	if err != nil {
		return nil, err
	}
	hw := map[int64][]string{}
	for _, f := range differs {
		hw[f.OfferID] = append(hw[f.OfferID], f.Message)
	}
	out := make(map[int64][]market.RedFlag, len(offers))
	for _, o := range offers {
		in := moderationInput(o, records[o.ProviderID], prices)
		in.HardwareDiffers = hw[o.ID]
		out[o.ID] = market.RedFlags(o, in)
	}
	return out, nil
}

// moderationInput gathers what market.RedFlags needs for one offer: the
// provider's record and the prices of the other listed offers of the
// same model.
func moderationInput(o market.Offer, rec market.ProviderRecord, prices map[string][]store.ListedPrice) market.ModerationInput {
	in := market.ModerationInput{Record: rec}
	for _, p := range prices[o.AcceleratorID] {
		if p.OfferID != o.ID {
			in.MarketPrices = append(in.MarketPrices, p.Price)
		}
	}
	return in
}

// DecideOffer records an admin's review decision on an offer (approve,
// reject, ask for changes) and makes the matcher follow it.
func (s *Service) DecideOffer(ctx context.Context, adminID, offerID int64, decision market.ReviewState, note string) (market.Offer, error) {
	switch decision {
	case market.ReviewApproved, market.ReviewRejected, market.ReviewChangesRequested:
	default:
		return market.Offer{}, market.Errorf(market.CodeInvalid, "Choose approve, reject or ask for changes.")
	}
	o, err := s.db.DecideOffer(ctx, adminID, offerID, decision, note, s.now())
	if err != nil {
		return market.Offer{}, err
	}
	return o, nil
}

// VerifyFigure records an admin's verification of one of an offer's
// figures.
func (s *Service) VerifyFigure(ctx context.Context, adminID, offerID int64, kind market.FigureKind, note string) error {
	if err := s.db.VerifyFigure(ctx, adminID, offerID, kind, note, s.now()); err != nil {
		return err
	}
	return nil
}

// SuspendProvider suspends a provider: their offers leave the matcher at
// once (the catalogue and the booking transaction already refuse a
// suspended provider's offers), open reservations are flagged and tokens
// revoked (store.SuspendProvider).
func (s *Service) SuspendProvider(ctx context.Context, adminID, providerID int64, reason string) (store.Suspension, error) {
	sp, err := s.db.SuspendProvider(ctx, adminID, providerID, reason, s.now())
	if err != nil {
		return store.Suspension{}, err
	}
	s.log.Info("provider suspended", "provider_id", providerID, "admin_id", adminID, "flagged", sp.Flagged)
	return sp, nil
}

// ReinstateProvider lifts a suspension: the provider's approved offers are
// listed again.
func (s *Service) ReinstateProvider(ctx context.Context, adminID, providerID int64, note string) error {
	if _, err := s.db.ReinstateProvider(ctx, adminID, providerID, note, s.now()); err != nil {
		return err
	}
	s.log.Info("provider reinstated", "provider_id", providerID, "admin_id", adminID)
	return nil
}

// ClearReservationFlag records an admin clearing a suspension's flag on a
// reservation.
func (s *Service) ClearReservationFlag(ctx context.Context, adminID, flagID int64, note string) error {
	return s.db.ClearReservationFlag(ctx, adminID, flagID, note, s.now())
}

package workflow

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// Automatic replacement (docs/replacement.md): the background tick, under
// the lease, finds the outages the agents measured that call for a
// replacement, re-matches the piece's remaining window (market.Rematch)
// and, as the buyer's policy says, books the replacement (auto), offers it
// (ask) or leaves the rental (never). Each outage is decided once: the
// store records one row per outage under its unique key, in the same
// transaction as the booking.

// replaceTick is the replacement step of the background work at now:
// offers not confirmed in time lapse, each new trigger is decided, and
// the refunds of cheaper replacements are made.
func (s *Service) replaceTick(ctx context.Context, now time.Time) {
	lapsed, err := s.db.LapseReplacementOffers(ctx, now)
	if err != nil {
		s.log.Error("background: lapse replacement offers", "err", err)
	}
	for _, rep := range lapsed {
		s.log.Info("replacement offer lapsed", "replacement_id", rep.ID, "reservation_id", rep.ReservationID)
	}
	triggers, err := s.db.ListReplacementTriggers(ctx, now)
	if err != nil {
		s.log.Error("background: list replacement triggers", "err", err)
	}
	for _, t := range triggers {
		if s.refuseMetered(ctx, t.Reservation.ID) != nil {
			continue // a metered rental is not billed for the outage's minutes; the buyer may stop it
		}
		s.decideReplacement(ctx, t, now)
	}
	s.replacementRefunds(ctx, now)
}

// decideReplacement decides one trigger at now under the buyer's policy.
// A booking that meets a conflict (capacity taken meanwhile) records
// nothing, so the next tick plans again while the piece runs.
func (s *Service) decideReplacement(ctx context.Context, t store.ReplacementTrigger, now time.Time) {
	rep := store.Replacement{OutageID: t.OutageID, ReservationID: t.Reservation.ID, PieceID: t.Piece.ID, FailedNode: t.Node,
		Kind: t.Kind, From: now, Until: t.Piece.End}
	req, err := market.DecodeRequestJSON([]byte(t.Reservation.RequestJSON))
	if err != nil {
		rep.Policy, rep.State, rep.Reason = market.ReplaceNever, store.ReplacementNotWanted, "The request this reservation was booked with is not on record."
		s.recordDecision(ctx, rep, now)
		return
	}
	rep.Policy = req.Replacement.Effective()
	if rep.Policy == market.ReplaceNever {
		rep.State = store.ReplacementNotWanted
		s.recordDecision(ctx, rep, now)
		return
	}
	opt, split, why, err := s.planReplacement(ctx, req, t.Piece, t.Node, now)
	if err != nil {
		s.log.Error("replacement: plan", "reservation_id", t.Reservation.ID, "outage_id", t.OutageID, "err", err)
		return
	}
	switch {
	case why != "":
		rep.State, rep.Reason = store.ReplacementUnfilled, why
		s.recordDecision(ctx, rep, now)
	case rep.Policy == market.ReplaceAsk:
		rep.State, rep.OfferExpiresAt = store.ReplacementOffered, now.Add(market.ReplacementOfferTTL)
		rep.Reason = describeOption(opt, split)
		s.recordDecision(ctx, rep, now)
	default:
		s.bookReplacement(ctx, rep, 0, opt, split)
	}
}

// recordDecision records a decision that books nothing, logging failures
// (the next tick tries again: nothing was recorded).
func (s *Service) recordDecision(ctx context.Context, rep store.Replacement, now time.Time) {
	got, err := s.db.RecordReplacementDecision(ctx, rep, now)
	if err != nil {
		s.log.Error("replacement: record decision", "reservation_id", rep.ReservationID, "outage_id", rep.OutageID, "err", err)
		return
	}
	s.log.Info("replacement decided", "replacement_id", got.ID, "reservation_id", got.ReservationID, "state", got.State, "reason", got.Reason)
}

// bookReplacement books opt through the store's one transaction and
// brings the index in step with the moved capacity.
func (s *Service) bookReplacement(ctx context.Context, rep store.Replacement, buyerID int64, opt market.ReplacementOption, split market.ReplacementSplit) (store.Replacement, error) {
	got, booked, err := s.db.BookReplacement(ctx, rep, buyerID, opt.Pieces, split, opt.Tier, s.now())
	if err != nil {
		s.log.Warn("replacement not booked; planned again at the next tick", "reservation_id", rep.ReservationID, "outage_id", rep.OutageID, "err", err)
		return store.Replacement{}, err
	}
	if !booked {
		return got, nil
	}
	s.log.Info("replacement booked", "replacement_id", got.ID, "reservation_id", got.ReservationID, "tier", int(got.Tier),
		"cost_cents", int64(split.Cost), "refund_cents", int64(split.Refund), "provider_share_cents", int64(split.ProviderShare))
	return got, nil
}

// planReplacement re-matches piece's remaining window from `from` with
// node left out, over every listed offer and the capacity held now, and
// picks the first option the money rule accepts. why says, when none is
// chosen, what the buyer is told: the matcher's explanation, or the money
// rule's refusal. The buyer's maximum premium is not offered yet: a
// replacement costs them nothing more (no off-session charge is made for
// a premium; docs/replacement.md).
func (s *Service) planReplacement(ctx context.Context, req market.Request, piece market.ReservationPiece, node int, from time.Time) (market.ReplacementOption, market.ReplacementSplit, string, error) {
	listings, err := s.db.ListAllListedOffers(ctx, from)
	if err != nil {
		return market.ReplacementOption{}, market.ReplacementSplit{}, "", err
	}
	commitments, err := s.db.ListAllCommitments(ctx, from)
	if err != nil {
		return market.ReplacementOption{}, market.ReplacementSplit{}, "", err
	}
	records, err := s.db.ProviderRecords(ctx, from)
	if err != nil {
		return market.ReplacementOption{}, market.ReplacementSplit{}, "", err
	}
	cands := make([]market.Candidate, 0, len(listings))
	for _, l := range listings {
		cands = append(cands, candidate(l.Offer, records[l.Offer.ProviderID], 0, 0))
	}
	res, err := market.Rematch(market.RematchInput{Request: req, Piece: piece, FailedNode: node, From: from, Until: piece.End,
		Candidates: cands, Commitments: commitments})
	if err != nil {
		return market.ReplacementOption{}, market.ReplacementSplit{}, "", err
	}
	opt, split, why, ok := market.ChooseReplacement(piece, from, res.Options, 0)
	if ok {
		return opt, split, "", nil
	}
	if len(res.Options) == 0 {
		why = "No offer meets the request for the remaining time (" + res.Explanation.Summary() + ")."
	}
	return market.ReplacementOption{}, market.ReplacementSplit{}, why, nil
}

// describeOption says what a replacement is, for the offer to the buyer.
func describeOption(o market.ReplacementOption, s market.ReplacementSplit) string {
	var parts []string
	for _, p := range o.Pieces {
		parts = append(parts, fmt.Sprintf("%d device(s) on offer #%d", p.Devices, p.OfferID))
	}
	money := "at no extra cost"
	switch {
	case s.Refund > 0:
		money = s.Refund.String() + " cheaper, refunded to your card"
	case s.ProviderShare > 0:
		money = "dearer by " + s.ProviderShare.String() + ", borne by the failing provider"
	}
	return strings.Join(parts, " and ") + " (" + o.Tier.Label() + "), " + money + "."
}

// ConfirmReplacement books the replacement offered to the buyer (ask
// policy) while the offer is live, re-matched from now (capacity may have
// moved since it was offered), through the same booking transaction as an
// automatic one. When nothing fits any more it is a conflict saying so;
// the offer stays until it lapses.
func (s *Service) ConfirmReplacement(ctx context.Context, buyerID, replacementID int64) (store.Replacement, error) {
	now := s.now()
	rep, err := s.db.FindReplacement(ctx, buyerID, replacementID)
	if err != nil {
		return store.Replacement{}, err
	}
	if !rep.OfferLive(now) {
		return store.Replacement{}, market.Errorf(market.CodeConflict, "This replacement is no longer offered (it is %s).", strings.ReplaceAll(rep.State, "_", " "))
	}
	r, err := s.db.FindBuyerReservation(ctx, buyerID, rep.ReservationID)
	if err != nil {
		return store.Replacement{}, err
	}
	var piece market.ReservationPiece
	for _, p := range r.Pieces {
		if p.ID == rep.PieceID {
			piece = p
		}
	}
	req, err := market.DecodeRequestJSON([]byte(r.RequestJSON))
	if err != nil {
		return store.Replacement{}, err
	}
	opt, split, why, err := s.planReplacement(ctx, req, piece, rep.FailedNode, now)
	if err != nil {
		return store.Replacement{}, err
	}
	if why != "" {
		return store.Replacement{}, market.Errorf(market.CodeConflict, "%s", why)
	}
	rep.From = now
	return s.bookReplacement(ctx, rep, buyerID, opt, split)
}

// replacementRefunds refunds, on the buyer's payment under the
// replacement's idempotency key, the difference of each cheaper
// replacement due at now, and records it; a failure is recorded for a
// retry with backoff.
func (s *Service) replacementRefunds(ctx context.Context, now time.Time) {
	due, err := s.db.ListDueReplacementRefunds(ctx, now)
	if err != nil {
		s.log.Error("background: list replacement refunds", "err", err)
		return
	}
	for _, f := range due {
		rep := f.Replacement
		ref, err := s.pay.Refund(ctx, f.PaymentIntentID, rep.Split.Refund, market.ReplacementKey(rep.ID, "refund"))
		if err == nil {
			err = s.db.RecordReplacementRefund(ctx, rep.ID, ref.ID, now)
		}
		if err != nil {
			s.log.Error("replacement: refund failed; will retry", "replacement_id", rep.ID, "attempt", rep.Attempts+1, "err", err)
			if rerr := s.db.RecordReplacementRefundFailure(ctx, rep.ID, err.Error(), now.Add(backoff(rep.Attempts+1)), now); rerr != nil {
				s.log.Error("replacement: record refund failure", "replacement_id", rep.ID, "err", rerr)
			}
		}
	}
}

// reconcileReplacements checks, per rental with a booked replacement, the
// identity buyer paid = delivered + replacement + refunds: the charges
// recorded equal the amounts its pieces now settle for (the originals'
// delivered parts and the replacements) plus the replacements' refunds;
// and lists the refunds not made yet.
func (s *Service) reconcileReplacements(ctx context.Context, entries []market.LedgerEntry) ([]Difference, error) {
	reps, err := s.db.ListAllReplacements(ctx)
	if err != nil {
		return nil, err
	}
	refunds := map[int64]market.Cents{}
	var order []int64
	var out []Difference
	for _, rep := range reps {
		if rep.State != store.ReplacementBooked {
			continue
		}
		if _, seen := refunds[rep.ReservationID]; !seen {
			order = append(order, rep.ReservationID)
		}
		refunds[rep.ReservationID] += rep.Split.Refund
		if !rep.RefundDone {
			out = append(out, Difference{ReservationID: rep.ReservationID, What: fmt.Sprintf("replacement %d: refund of the difference not made yet", rep.ID),
				Ledger: rep.Split.Refund.String(), Processor: rep.LastError})
		}
	}
	charged := map[int64]market.Cents{}
	for _, e := range entries {
		if e.Kind == market.EntryCharge {
			charged[e.ReservationID] += e.Amount
		}
	}
	for _, id := range order {
		r, err := s.db.FindReservation(ctx, id)
		if err != nil {
			return nil, err
		}
		var pieces market.Cents
		for _, p := range r.Pieces {
			pieces += p.AmountCents
		}
		if charged[id] != pieces+refunds[id] {
			out = append(out, Difference{ReservationID: id, What: "replaced rental: paid differs from delivered + replacement + refunds",
				Ledger: charged[id].String(), Processor: (pieces + refunds[id]).String()})
		}
	}
	return out, nil
}

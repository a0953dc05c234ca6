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
	// The replacement starts on a whole second, as pieces are stored, so
	// the money is split over the very seconds booked.
	now = now.Truncate(time.Second)
	rep := store.Replacement{OutageID: t.OutageID, IncidentID: t.IncidentID, TriggeredBy: t.AdminID, ReservationID: t.Reservation.ID, PieceID: t.Piece.ID,
		FailedNode: t.Node, Kind: t.Kind, From: now, Until: t.Piece.End}
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
	case split.BuyerShare > 0:
		if _, err := s.chargeReplacement(ctx, rep, 0, opt, split); market.ErrorCode(err) == market.CodeNotFound {
			rep.State, rep.Reason = store.ReplacementUnfilled, fmt.Sprintf("A replacement costs you %s more than the remaining time paid for, within your maximum premium, but you have no saved card to charge it to.", split.BuyerShare)
			s.recordDecision(ctx, rep, now)
		}
	default:
		s.bookReplacement(ctx, rep, 0, opt, split)
	}
}

// chargeReplacement books a dearer replacement whose buyer's share is
// charged to the buyer's saved card: the decision and the pending charge
// in one transaction (store.RecordReplacementCharge), then the charge,
// whose paid outcome books the replacement in the transaction that
// finishes the charge (makeCharge). A crash in between leaves the charge
// pending for the retrier, which makes the same call under the same key.
// No saved card is a market CodeNotFound error, with nothing recorded.
func (s *Service) chargeReplacement(ctx context.Context, rep store.Replacement, buyerID int64, opt market.ReplacementOption, split market.ReplacementSplit) (store.Replacement, error) {
	got, ci, err := s.db.RecordReplacementCharge(ctx, rep, buyerID, opt.Pieces, split, opt.Tier, s.now())
	if err != nil {
		if market.ErrorCode(err) != market.CodeNotFound {
			s.log.Warn("replacement charge not recorded; planned again at the next tick", "reservation_id", rep.ReservationID, "outage_id", rep.OutageID, "err", err)
		}
		return store.Replacement{}, err
	}
	if ci.ID == 0 {
		return got, nil // decided before
	}
	if _, err := s.makeCharge(ctx, ci); err != nil {
		return store.Replacement{}, err
	}
	return s.db.FindReplacement(ctx, 0, got.ID)
}

// bookChargedReplacement books the replacement a paid charge of its
// buyer's share stands for; one that can no longer be booked is recorded
// as unfilled with the payment, which is refunded in full.
func (s *Service) bookChargedReplacement(ctx context.Context, ci market.ChargeIntent, paymentIntentID string, now time.Time) error {
	got, err := s.db.BookChargedReplacement(ctx, ci.ID, paymentIntentID, now)
	if err == nil {
		s.log.Info("replacement booked", "replacement_id", got.ID, "reservation_id", got.ReservationID, "tier", int(got.Tier),
			"cost_cents", int64(got.Split.Cost), "provider_share_cents", int64(got.Split.ProviderShare), "buyer_share_cents", int64(got.Split.BuyerShare))
		return nil
	}
	if market.ErrorCode(err) != market.CodeConflict {
		return err // the intent stays pending: the retrier books it
	}
	if rerr := s.db.RecordUnbookedReplacementCharge(ctx, ci.ID, paymentIntentID, market.ErrorMessage(err), now); rerr != nil {
		return rerr
	}
	s.replacementRefunds(ctx, now)
	return err
}

// TriggerReplacement is an admin's trigger of a replacement from incident
// incidentID of reservation reservationID (a buyer's report, which alone
// never triggers one), for node of the piece (-1: the piece's first node):
// the incident must be a host failure or fewer devices, on a piece that
// runs now with at least market.MinReplacementWindow left. It is decided
// as a measured outage is — under the buyer's policy, once per incident —
// and the decision is returned. The transaction that records the decision
// records adminID on it and in the audit trail (store.AuditReplacementTrigger).
// A decision already made is a conflict saying what it was.
func (s *Service) TriggerReplacement(ctx context.Context, adminID, reservationID, incidentID int64, node int) (store.Replacement, error) {
	if adminID <= 0 {
		return store.Replacement{}, market.Errorf(market.CodeForbidden, "Only an admin may trigger a replacement.")
	}
	now := s.now().Truncate(time.Second)
	incs, err := s.db.ListIncidents(ctx, reservationID)
	if err != nil {
		return store.Replacement{}, err
	}
	var inc store.Incident
	for _, i := range incs {
		if i.ID == incidentID {
			inc = i
		}
	}
	if inc.ID == 0 {
		return store.Replacement{}, market.Errorf(market.CodeNotFound, "That incident could not be found.")
	}
	if inc.Kind != market.IncidentHostFailure && inc.Kind != market.IncidentFewerDevices {
		return store.Replacement{}, market.Errorf(market.CodeInvalid, "Only a host failure or fewer devices than booked calls for a replacement.")
	}
	reps, err := s.db.ListReplacements(ctx, reservationID)
	if err != nil {
		return store.Replacement{}, err
	}
	for _, rep := range reps {
		if rep.IncidentID == inc.ID {
			return store.Replacement{}, market.Errorf(market.CodeConflict, "A replacement was already decided for this incident (%s).", strings.ReplaceAll(rep.State, "_", " "))
		}
	}
	r, err := s.db.FindReservation(ctx, reservationID)
	if err != nil {
		return store.Replacement{}, err
	}
	var piece market.ReservationPiece
	for _, p := range r.Pieces {
		if p.ID == inc.PieceID {
			piece = p
		}
	}
	// The admin vouches for the failure: it counts as measured.
	if r.State != market.ReservationActive || piece.ID == 0 || !market.TriggersReplacement(inc.Kind, true, piece, now) {
		return store.Replacement{}, market.Errorf(market.CodeConflict, "The incident's piece is not running with at least %d minutes left; the SLA credit is the remedy.",
			int(market.MinReplacementWindow/time.Minute))
	}
	if node < 0 && len(piece.Nodes) > 0 {
		node = piece.Nodes[0].Node
	}
	onPiece := false
	for _, n := range piece.Nodes {
		onPiece = onPiece || n.Node == node
	}
	if !onPiece {
		return store.Replacement{}, market.Errorf(market.CodeInvalid, "Choose a node the piece runs on.")
	}
	s.log.Info("replacement triggered by an admin", "admin_id", adminID, "reservation_id", r.ID, "incident_id", inc.ID, "node", node)
	s.decideReplacement(ctx, store.ReplacementTrigger{IncidentID: inc.ID, AdminID: adminID, Node: node, Kind: inc.Kind, Reservation: r, Piece: piece}, now)
	if reps, err = s.db.ListReplacements(ctx, reservationID); err != nil {
		return store.Replacement{}, err
	}
	for _, rep := range reps {
		if rep.IncidentID == inc.ID {
			return rep, nil
		}
	}
	return store.Replacement{}, market.Errorf(market.CodeConflict, "No replacement could be booked just now (the capacity moved); try again.")
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
// rule's refusal, under the buyer's maximum premium.
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
	opt, split, why, ok := market.ChooseReplacement(piece, from, res.Options, req.Replacement.MaxPremium)
	if ok {
		return opt, split, "", nil
	}
	switch {
	case len(res.Options) == 0 && res.Explanation.Fit > 0:
		why = "No offer can take the remaining time (" + res.Explanation.Summary() + ", but none rents for as short a time as is left)."
	case len(res.Options) == 0:
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
	case s.BuyerShare > 0:
		money = fmt.Sprintf("dearer by %s: the failing provider bears %s and %s is charged to your saved card when you confirm",
			s.ProviderShare+s.BuyerShare, s.ProviderShare, s.BuyerShare)
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
	now := s.now().Truncate(time.Second) // a whole second, as in decideReplacement
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
	if split.BuyerShare > 0 {
		got, err := s.chargeReplacement(ctx, rep, buyerID, opt, split)
		if market.ErrorCode(err) == market.CodeNotFound {
			return store.Replacement{}, market.Errorf(market.CodeConflict, "This replacement costs you %s more than the remaining time paid for; save a card on your account to pay for it.", split.BuyerShare)
		}
		return got, err
	}
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
		if rep.State != store.ReplacementBooked && (rep.State != store.ReplacementUnfilled || rep.PremiumRef == "") {
			continue // nothing moved (an unfilled one with a paid share refunds it)
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

package workflow

import (
	"context"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// ExtensionQuote is what extending a buyer's running reservation would
// book now.
type ExtensionQuote struct {
	Reservation market.Reservation
	// Limits is how long it can be extended: while every piece's nodes
	// stay free after it, within its offers' rentals and windows.
	Limits market.ExtensionLimits
	// Extension is the priced pieces for the hours asked; empty when no
	// hours were asked or they cannot be booked.
	Extension market.Extension
}

// QuoteExtension prices extending the buyer's reservation id by hours
// (market.ExtensionPieces: the same pieces from where they end, at the
// offers' prices now) and says how long its nodes stay free after it,
// counted from the commitments in the database. With hours 0 it only says
// how long. The quote carries the reservation and limits even when the
// hours cannot be booked: the error then says why (an invalid error on
// "hours" when they are outside the limits).
func (s *Service) QuoteExtension(ctx context.Context, buyerID, id int64, hours int) (ExtensionQuote, error) {
	r, err := s.db.FindBuyerReservation(ctx, buyerID, id)
	if err != nil {
		return ExtensionQuote{}, err
	}
	now := s.now()
	q := ExtensionQuote{Reservation: r}
	if err := market.CanExtend(r, now); err != nil {
		return q, err
	}
	exts, err := s.db.FindExtensions(ctx, r.ID)
	if err != nil {
		return q, err
	}
	if x, ok := market.PendingExtension(exts, now); ok {
		return q, market.Errorf(market.CodeConflict, "Reservation #%d already continues this one; pay for or cancel it, or extend it once it runs.", x.ID)
	}
	offers := map[int64]market.Offer{}
	var cs []market.Commitment
	for _, p := range r.Pieces {
		if _, seen := offers[p.OfferID]; seen {
			continue
		}
		l, err := s.db.FindOfferByID(ctx, p.OfferID)
		if err != nil && market.ErrorCode(err) != market.CodeNotFound {
			return q, err
		}
		if err == nil && !l.ProviderSuspended {
			offers[p.OfferID] = l.Offer
		}
		oc, err := s.db.ListOfferCommitments(ctx, p.OfferID, now)
		if err != nil {
			return q, err
		}
		cs = append(cs, oc...)
	}
	if err := s.spotPriced(ctx, offers, now); err != nil {
		return q, err
	}
	q.Limits = market.ExtensionRoom(r, offers, cs, now)
	if hours == 0 {
		return q, nil
	}
	ext, err := market.ExtensionPieces(r, offers, hours, datasetGB(r), now)
	if err != nil {
		return q, err
	}
	if hours > q.Limits.MaxHours {
		msg := "The same devices are booked right after this reservation, so it cannot be extended now."
		if q.Limits.OK() {
			msg = fmt.Sprintf("The same devices are free after it for %d to %d hours.", q.Limits.MinHours, q.Limits.MaxHours)
		}
		return q, &market.Error{Code: market.CodeInvalid, Message: msg, Fields: map[string]string{"hours": msg}}
	}
	q.Extension = ext
	return q, nil
}

// Extend books the extension QuoteExtension prices as a new reservation
// held for hold (store.CreateExtension: re-checked node by node on the
// same nodes in one transaction, all pieces or none) and adds it to the
// matcher index. It is paid like any held booking. seen is the amount the
// buyer was shown: a different price now is a conflict, to be shown again.
func (s *Service) Extend(ctx context.Context, buyerID, id int64, hours int, seen market.Cents, hold time.Duration) (market.Reservation, error) {
	if hours == 0 {
		return market.Reservation{}, &market.Error{Code: market.CodeInvalid, Message: "Say by how many hours.", Fields: map[string]string{"hours": "Say by how many hours."}}
	}
	if err := s.refuseMetered(ctx, id); err != nil {
		return market.Reservation{}, err
	}
	q, err := s.QuoteExtension(ctx, buyerID, id, hours)
	if err != nil {
		return market.Reservation{}, err
	}
	if q.Extension.Amount != seen {
		return market.Reservation{}, market.Errorf(market.CodeConflict, "The price of this extension is now %s, not the %s you saw. Check it and confirm again.", q.Extension.Amount, seen)
	}
	r, err := s.db.CreateExtension(ctx, buyerID, id, q.Extension.Pieces, s.now(), hold)
	if err != nil {
		return market.Reservation{}, err
	}
	s.log.Info("reservation extension held", "reservation_id", r.ID, "extends_id", id, "buyer_id", buyerID, "amount_cents", int64(r.AmountCents))
	return r, nil
}

// datasetGB is the dataset the reservation's request keeps on its pieces
// (0 when the request says none or cannot be read).
func datasetGB(r market.Reservation) int {
	req, err := market.DecodeRequestJSON([]byte(r.RequestJSON))
	if err != nil {
		return 0
	}
	return req.Workload.DatasetGB
}

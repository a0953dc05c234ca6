package workflow

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// Standing orders are re-matched when capacity appears or gets cheaper,
// not on a timer: every change the matcher index follows (an offer
// listed, edited, resumed; a reservation booked, cancelled or expired;
// the same changes from other replicas, heard through Follow) names its
// offer to the order queue (followOffers), which wakes
// MatchOrders. A wake takes the open orders in priority order
// (market.SortByPriority: the oldest first), keeps those the changed
// offers may serve (market.MayServe), matches each on the index and fills
// the first acceptable quote (market.NextFill) through the store's atomic
// fill, then moves on to the orders after it. A fill is a conditional
// update on the order's state in the booking transaction, so with several
// replicas each order fills once, and capacity is re-checked there as for
// any booking.

// orderQueue collects the offers changed since the last matching pass and
// wakes the matcher.
type orderQueue struct {
	mu      sync.Mutex
	changed map[int64]bool
	// all asks for a pass over every open order: changes may have been
	// missed (the change feed reconnected and the index was reloaded).
	all  bool
	wake chan struct{} // buffered 1: a pending wake-up
	// pass runs matching passes one at a time in this process, so an
	// older order is always tried before a younger one for the same change.
	pass sync.Mutex
}

func newOrderQueue() *orderQueue { return &orderQueue{wake: make(chan struct{}, 1)} }

// note records that offerID changed and wakes the matcher.
func (q *orderQueue) note(offerID int64) {
	q.mu.Lock()
	if q.changed == nil {
		q.changed = map[int64]bool{}
	}
	q.changed[offerID] = true
	q.mu.Unlock()
	q.signal()
}

// noteAll asks for a pass over every open order and wakes the matcher.
func (q *orderQueue) noteAll() {
	q.mu.Lock()
	q.all = true
	q.mu.Unlock()
	q.signal()
}

func (q *orderQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take returns and clears the changed offers, and whether every open
// order is to be matched.
func (q *orderQueue) take() (map[int64]bool, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	c, all := q.changed, q.all
	q.changed, q.all = nil, false
	return c, all
}

// orderHold is how long a fill is held for payment: the hold of a quote
// booked by hand.
const orderHold = market.DefaultHoldMinutes * time.Minute

// MatchOrders re-matches standing orders whenever the matcher index
// follows a change, until ctx ends. The process owner runs it beside Run
// and Follow and waits for it before closing the database; a pass under
// way finishes first.
func (s *Service) MatchOrders(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.orders.wake:
		}
		changed, all := s.orders.take()
		if all {
			changed = nil // every open order
		} else if len(changed) == 0 {
			continue
		}
		s.matchOrders(context.WithoutCancel(ctx), changed)
	}
}

// PlaceStandingOrder stores a buyer's new standing order (validated and
// checked against the anti-speculation rules by the store) and matches it
// once at once, behind any older open order, so it may fill before this
// returns. It returns the order as it stands after that pass.
func (s *Service) PlaceStandingOrder(ctx context.Context, o market.StandingOrder) (market.StandingOrder, error) {
	if o.OnFill == market.FillPay {
		if _, err := s.db.DefaultPaymentMethod(ctx, o.BuyerID); market.ErrorCode(err) == market.CodeNotFound {
			return market.StandingOrder{}, &market.Error{Code: market.CodeInvalid, Message: "Please correct the highlighted fields.",
				Fields: map[string]string{"on_fill": "Add a payment method on your account page first, or choose to hold the fill for payment."}}
		} else if err != nil {
			return market.StandingOrder{}, err
		}
	}
	// The fill runs in the request's runtime, its secrets filled from its
	// template as a booking's are (kept with the order, not in its JSON).
	rt, err := s.bookingRuntime(ctx, o.BuyerID, o.Request.Runtime)
	if err != nil {
		return market.StandingOrder{}, err
	}
	o.Request.Runtime = rt
	o, err = s.db.CreateStandingOrder(ctx, o, s.now())
	if err != nil {
		return market.StandingOrder{}, err
	}
	s.log.Info("standing order placed", "order_id", o.ID, "buyer_id", o.BuyerID, "limit", o.LimitText())
	s.matchOrders(ctx, nil)
	row, err := s.db.FindStandingOrder(ctx, o.BuyerID, o.ID)
	if err != nil {
		return o, nil
	}
	return row.StandingOrder, nil
}

// CancelStandingOrder cancels the buyer's own open order.
func (s *Service) CancelStandingOrder(ctx context.Context, buyerID, id int64) (market.StandingOrder, error) {
	o, err := s.db.CancelStandingOrder(ctx, buyerID, id, s.now())
	if err != nil {
		return market.StandingOrder{}, err
	}
	s.log.Info("standing order cancelled", "order_id", o.ID)
	return o, nil
}

// expireOrders expires the open orders whose fill-by date has come (Tick).
func (s *Service) expireOrders(ctx context.Context, now time.Time) {
	expired, err := s.db.ExpireStandingOrders(ctx, now)
	if err != nil {
		s.log.Error("background: expire standing orders", "err", err)
	}
	for _, o := range expired {
		s.log.Info("standing order expired", "order_id", o.ID)
	}
}

// matchOrders is one matching pass over the open orders that an offer in
// changed may serve (every open order when changed is nil).
func (s *Service) matchOrders(ctx context.Context, changed map[int64]bool) {
	s.orders.pass.Lock()
	defer s.orders.pass.Unlock()
	now := s.now()
	open, err := s.db.ListOpenStandingOrders(ctx, now)
	if err != nil {
		s.log.Error("standing orders: list open", "err", err)
		return
	}
	if len(open) == 0 {
		return
	}
	if changed != nil {
		var offers []market.Offer
		for id := range changed {
			if l, err := s.db.FindOfferByID(ctx, id); err == nil {
				offers = append(offers, l.Offer)
			}
		}
		keep := open[:0]
		for _, o := range open {
			for _, off := range offers {
				if market.MayServe(off, o.Request) {
					keep = append(keep, o)
					break
				}
			}
		}
		open = keep
	}
	market.SortByPriority(open)
	// The same ranking as a quote the buyer asks for: the quote budget,
	// hourly emissions and the carbon-aware start (quote.go).
	idx := s.Index()
	match := func(r market.Request) (market.Result, error) {
		res, _, err := s.quoteOn(ctx, idx, r, now)
		return res, err
	}
	for len(open) > 0 {
		i, q, ok := market.NextFill(open, match, now)
		if !ok {
			return
		}
		s.fillOrder(ctx, open[i], q, now)
		open = open[i+1:]
	}
}

// fillOrder books quote q for order o and, for an order that pays at
// once, makes the charge of the buyer's saved card that the fill recorded. A fill that loses a race
// (the order filled or cancelled meanwhile, the capacity taken) is logged
// and skipped: the next change re-matches the order.
func (s *Service) fillOrder(ctx context.Context, o market.StandingOrder, q market.Quote, now time.Time) {
	offers := map[int64]market.Offer{}
	for _, p := range q.Pieces {
		l, err := s.db.FindOfferByID(ctx, p.OfferID)
		if err != nil {
			s.log.Warn("standing order: quoted offer not loaded", "order_id", o.ID, "offer_id", p.OfferID, "err", err)
			return
		}
		offers[p.OfferID] = l.Offer
	}
	pieces, err := market.PiecesFromQuote(q, offers)
	if err != nil {
		s.log.Warn("standing order: quote not bookable", "order_id", o.ID, "err", err)
		return
	}
	o, r, err := s.db.FillStandingOrder(ctx, o.ID, pieces, now, orderHold)
	if err != nil {
		if market.ErrorCode(err) == market.CodeInternal {
			s.log.Error("standing order: fill", "order_id", o.ID, "err", err)
		} else {
			s.log.Info("standing order not filled", "order_id", o.ID, "reason", market.ErrorMessage(err))
		}
		return
	}
	s.log.Info("standing order filled", "order_id", o.ID, "reservation_id", r.ID, "amount_cents", int64(r.AmountCents))
	if o.OnFill != market.FillPay {
		return
	}
	// The fill's transaction recorded the charge (none without a saved
	// card); a crash from here on leaves it to the retrier (chargeTick).
	ci, err := s.db.FindPendingReservationCharge(ctx, r.ID)
	if market.ErrorCode(err) == market.CodeNotFound {
		err = market.Errorf(market.CodeInvalid, msgNoSavedMethod)
	}
	if err == nil {
		_, err = s.payReservationCharge(ctx, ci, r)
	}
	if err != nil {
		msg := market.ErrorMessage(err)
		if market.ErrorCode(err) == market.CodeInternal {
			s.log.Error("standing order: pay at once", "order_id", o.ID, "reservation_id", r.ID, "err", err)
			msg = "The payment could not be made."
		}
		note := fmt.Sprintf("%s Reservation #%d is held until %s: pay for it on its page before then, or the hold lapses.",
			msg, r.ID, market.FormatTime(r.HoldExpiresAt))
		if err := s.db.NoteStandingOrder(ctx, o.ID, note, fmt.Sprintf("/reservations/%d", r.ID), s.now()); err != nil {
			s.log.Error("standing order: note the declined payment", "order_id", o.ID, "err", err)
		}
		return
	}
	s.log.Info("standing order paid at once", "order_id", o.ID, "reservation_id", r.ID)
}

package market

import (
	"fmt"
	"slices"
	"time"
)

// A standing order is a request that waits for a price: the buyer states
// a limit (per reference device-hour, or a total budget), a fill-by date
// and what happens on a fill. While it is open, every change that frees or
// cheapens capacity re-matches it; the first acceptable quote is booked
// with the same atomic booking as a quote the buyer picks by hand.

// StandingOrderState is where a standing order is in its life.
type StandingOrderState string

// Standing order states. Open is the only state that can change.
const (
	OrderOpen      StandingOrderState = "open"      // waiting for capacity at the limit
	OrderFilled    StandingOrderState = "filled"    // booked: ReservationID is its reservation
	OrderExpired   StandingOrderState = "expired"   // the fill-by date passed unfilled
	OrderCancelled StandingOrderState = "cancelled" // withdrawn by the buyer
)

// Label is the state as a person reads it.
func (s StandingOrderState) Label() string {
	switch s {
	case OrderOpen:
		return "Open"
	case OrderFilled:
		return "Filled"
	case OrderExpired:
		return "Expired"
	case OrderCancelled:
		return "Cancelled"
	}
	return string(s)
}

// OrderLimitKind says what a standing order's limit caps.
type OrderLimitKind string

// Limit kinds.
const (
	// LimitPerRefDeviceHour caps the quote's effective cost per reference
	// device-hour of work (Quote.CentsPerRefDeviceHour).
	LimitPerRefDeviceHour OrderLimitKind = "price"
	// LimitTotalBudget caps the quote's total effective cost (Quote.Cost.Total).
	LimitTotalBudget OrderLimitKind = "budget"
)

// OnFill is what happens when a standing order fills.
type OnFill string

// On-fill choices.
const (
	// FillHold holds the reservation like a booked quote: the buyer pays
	// within the normal hold period, or the hold lapses.
	FillHold OnFill = "hold"
	// FillPay charges the buyer's saved payment method at once; a decline
	// leaves the reservation held, as FillHold does.
	FillPay OnFill = "pay"
)

// Anti-speculation rules and limits of standing orders.
const (
	// MaxOpenStandingOrders is how many open standing orders one buyer may have.
	MaxOpenStandingOrders = 5
	// MaxFillByAhead is how far ahead a fill-by date may lie.
	MaxFillByAhead = 60 * 24 * time.Hour
	// MinFillByAhead is how soon the fill-by date may be: at least an hour
	// away, so the order has a chance to fill.
	MinFillByAhead = time.Hour
	// A fill held for payment that the buyer does not pay lapses with its
	// hold (the reservation expires, the capacity returns to the market).
	// LapsesBeforeBlock lapses within LapseWindow block new standing orders
	// for LapseBlock after the latest one. Open orders stay open.
	LapsesBeforeBlock = 2
	LapseWindow       = 30 * 24 * time.Hour
	LapseBlock        = 7 * 24 * time.Hour
)

// StandingOrderRules is the anti-speculation rule in words, for the form,
// the orders page and docs/exchange.md.
func StandingOrderRules() []string {
	return []string{
		fmt.Sprintf("You may have at most %d open standing orders.", MaxOpenStandingOrders),
		fmt.Sprintf("The fill-by date is at least an hour and at most %d days ahead.", int(MaxFillByAhead/(24*time.Hour))),
		"A fill is booked like a quote you pick: held for payment for the normal hold period, or paid at once with your saved payment method.",
		fmt.Sprintf("A fill you do not pay lapses with its hold and the devices go back on the market. After %d lapsed fills within %d days you cannot place standing orders for %d days.",
			LapsesBeforeBlock, int(LapseWindow/(24*time.Hour)), int(LapseBlock/(24*time.Hour))),
		"Among orders the same capacity could fill, the oldest is filled first.",
	}
}

// StandingOrder is a buyer's request waiting for an acceptable quote.
type StandingOrder struct {
	ID      int64
	BuyerID int64
	// Request is the request to match; RequestJSON its portable form as stored.
	Request     Request
	RequestJSON string
	LimitKind   OrderLimitKind
	LimitCents  Cents
	FillBy      time.Time
	OnFill      OnFill
	State       StandingOrderState
	// ReservationID is the reservation a fill booked (0 until filled).
	ReservationID int64
	// Note says what happened after a fill that needs the buyer (a declined
	// payment); empty otherwise.
	Note      string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// LimitText is the limit as a person reads it.
func (o StandingOrder) LimitText() string {
	if o.LimitKind == LimitTotalBudget {
		return o.LimitCents.String() + " in total"
	}
	return o.LimitCents.String() + " per reference device-hour"
}

// OnFillText is the on-fill choice as a person reads it.
func (o OnFill) Text() string {
	if o == FillPay {
		return "Pay at once with my saved payment method"
	}
	return "Hold for payment"
}

// ValidateStandingOrder checks a new order at now: the request itself
// (ValidateRequest, which fills its defaults), the limit, the fill-by date
// and the on-fill choice. Field names are those of the form: limit_kind,
// limit, fill_by, on_fill; a request problem is reported on "request".
func ValidateStandingOrder(o *StandingOrder, now time.Time) error {
	p := Problems{}
	if err := ValidateRequest(&o.Request); err != nil {
		p.Add("request", "The request is not valid; correct it in the request builder first.")
	}
	switch o.LimitKind {
	case LimitPerRefDeviceHour, LimitTotalBudget:
	default:
		p.Add("limit_kind", "Choose a limit per reference device-hour or a total budget.")
	}
	switch {
	case o.LimitCents <= 0:
		p.Add("limit", "Enter a limit above zero.")
	case o.LimitCents > MaxBudgetCents:
		p.Add("limit", fmt.Sprintf("The limit can be at most %s.", MaxBudgetCents))
	}
	switch {
	case o.FillBy.IsZero():
		p.Add("fill_by", "Enter the date by which the order must fill.")
	case o.FillBy.Before(now.Add(MinFillByAhead)):
		p.Add("fill_by", "The fill-by date must be at least an hour from now.")
	case o.FillBy.After(now.Add(MaxFillByAhead)):
		p.Add("fill_by", fmt.Sprintf("The fill-by date can be at most %d days ahead.", int(MaxFillByAhead/(24*time.Hour))))
	case !o.Request.Constraints.Deadline.IsZero() && !o.FillBy.Before(o.Request.Constraints.Deadline):
		p.Add("fill_by", "The fill-by date must be before the request's deadline ("+FormatTime(o.Request.Constraints.Deadline)+"), or nothing filled could still run.")
	}
	switch o.OnFill {
	case FillHold, FillPay:
	default:
		p.Add("on_fill", "Choose what happens when the order fills.")
	}
	return p.Err()
}

// Accepts reports whether quote q is within the order's limit.
func (o StandingOrder) Accepts(q Quote) bool {
	switch o.LimitKind {
	case LimitPerRefDeviceHour:
		return q.CentsPerRefDeviceHour > 0 && q.CentsPerRefDeviceHour <= o.LimitCents
	case LimitTotalBudget:
		return q.Cost.Total <= o.LimitCents
	}
	return false
}

// AcceptableQuote is the quote a fill books: the best-ranked of quotes
// (the matcher's order, under the request's own preferences) within the
// order's limit.
func (o StandingOrder) AcceptableQuote(quotes []Quote) (Quote, bool) {
	for _, q := range quotes {
		if o.Accepts(q) {
			return q, true
		}
	}
	return Quote{}, false
}

// Fillable reports whether the order may fill at now: open and before its
// fill-by date.
func (o StandingOrder) Fillable(now time.Time) bool {
	return o.State == OrderOpen && now.Before(o.FillBy)
}

// MatchRequest is the order's request as matched for a fill: every quote
// (the acceptable one may rank below the request's own limit of quotes).
func (o StandingOrder) MatchRequest() Request {
	r := o.Request
	r.Limit = MaxQuoteLimit
	return r
}

// OrderBefore is the priority rule (price-time): among orders the same
// capacity could fill, the older fills first; ties by id. An order's limit
// decides whether it is eligible for a quote, not its place in the line.
func OrderBefore(a, b StandingOrder) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return a.CreatedAt.Before(b.CreatedAt)
	}
	return a.ID < b.ID
}

// SortByPriority sorts orders in fill priority (OrderBefore).
func SortByPriority(orders []StandingOrder) {
	slices.SortStableFunc(orders, func(a, b StandingOrder) int {
		switch {
		case OrderBefore(a, b):
			return -1
		case OrderBefore(b, a):
			return 1
		}
		return 0
	})
}

// NextFill takes orders, which must be in priority order (SortByPriority),
// and returns the index of the first that is fillable at now and has an
// acceptable quote under match, with that quote. Orders for which match
// fails are skipped (their request no longer matches, e.g. its window
// passed). The caller fills it and goes on with the orders after it.
func NextFill(orders []StandingOrder, match func(Request) (Result, error), now time.Time) (int, Quote, bool) {
	for i, o := range orders {
		if !o.Fillable(now) {
			continue
		}
		res, err := match(o.MatchRequest())
		if err != nil {
			continue
		}
		if q, ok := o.AcceptableQuote(res.Quotes); ok {
			return i, q, true
		}
	}
	return -1, Quote{}, false
}

// MayServe is a cheap pre-check: false when offer o cannot serve any piece
// of request r under its hard constraints on offer, model, family, memory,
// region and country, so a change to o need not re-match r. True does not
// mean a fill (capacity, time and price are for the matcher).
func MayServe(o Offer, r Request) bool {
	c := r.Constraints
	if len(c.OfferIDs) > 0 && !slices.Contains(c.OfferIDs, o.ID) {
		return false
	}
	if len(c.AcceleratorIDs) > 0 && !slices.Contains(c.AcceleratorIDs, o.AcceleratorID) {
		return false
	}
	if acc, ok := FindAccelerator(o.AcceleratorID); ok {
		if len(c.Families) > 0 && !slices.Contains(c.Families, acc.Family) {
			return false
		}
	}
	if c.MinMemoryGB > 0 && o.MemoryGB < c.MinMemoryGB {
		return false
	}
	if len(c.RegionIDs) > 0 && !slices.Contains(c.RegionIDs, o.RegionID) {
		return false
	}
	if reg, ok := FindRegion(o.RegionID); ok {
		if len(c.Countries) > 0 && !slices.Contains(c.Countries, reg.Country) {
			return false
		}
	}
	return true
}

// StandingOrdersBlockedUntil applies the lapse rule: given when the
// buyer's unpaid fills lapsed, it returns until when new standing orders
// are refused (LapsesBeforeBlock lapses within LapseWindow block them for
// LapseBlock after the latest), and whether that is after now.
func StandingOrdersBlockedUntil(lapses []time.Time, now time.Time) (time.Time, bool) {
	ts := slices.Clone(lapses)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	var until time.Time
	for i := LapsesBeforeBlock - 1; i < len(ts); i++ {
		if ts[i].Sub(ts[i-LapsesBeforeBlock+1]) <= LapseWindow {
			until = ts[i].Add(LapseBlock)
		}
	}
	return until, now.Before(until)
}

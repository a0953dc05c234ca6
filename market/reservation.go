package market

import (
	"fmt"
	"time"
)

// ReservationState is where a booking stands.
//
//	held ──pay──▶ confirmed ──start──▶ active ──end──▶ completed ──settle──▶ settled
//	  │               │
//	  ├─expire─▶ expired
//	  └─cancel─▶ cancelled ◀─cancel─┘ (confirmed, before start; the policy's fee applies)
type ReservationState string

// Reservation states.
const (
	ReservationHeld      ReservationState = "held"      // capacity held, awaiting payment
	ReservationConfirmed ReservationState = "confirmed" // paid, not started
	ReservationActive    ReservationState = "active"    // running
	ReservationCompleted ReservationState = "completed" // ended, not yet settled
	ReservationSettled   ReservationState = "settled"   // refunds and payouts done
	ReservationCancelled ReservationState = "cancelled"
	ReservationExpired   ReservationState = "expired" // the hold lapsed unpaid
)

// HoldsCapacity reports whether a reservation in this state keeps its
// devices out of the market.
func (s ReservationState) HoldsCapacity() bool {
	switch s {
	case ReservationHeld, ReservationConfirmed, ReservationActive:
		return true
	}
	return false
}

// PaidStates are the states of a reservation that was paid and not
// cancelled: confirmed and every state after it.
func PaidStates() []ReservationState {
	return []ReservationState{ReservationConfirmed, ReservationActive, ReservationCompleted, ReservationSettled}
}

// Label is the display name.
func (s ReservationState) Label() string {
	switch s {
	case ReservationHeld:
		return "held — awaiting payment"
	case ReservationConfirmed:
		return "confirmed"
	case ReservationActive:
		return "active"
	case ReservationCompleted:
		return "completed"
	case ReservationSettled:
		return "settled"
	case ReservationCancelled:
		return "cancelled"
	case ReservationExpired:
		return "expired"
	}
	return string(s)
}

// StateLabel is what a person reads as the reservation's state: its
// state's label, except that a cancelled rental the buyer rejected reads
// "rejected".
func (r Reservation) StateLabel() string {
	if r.State == ReservationCancelled && !r.RejectedAt.IsZero() {
		return "rejected"
	}
	return r.State.Label()
}

// LabelWithArticle names the state for the start of a sentence about a
// reservation, with the right article: "An active", "A held".
func (s ReservationState) LabelWithArticle() string {
	name := string(s)
	if name == "" {
		return "A"
	}
	switch name[0] {
	case 'a', 'e', 'i', 'o', 'u':
		return "An " + name
	}
	return "A " + name
}

var transitions = map[ReservationState][]ReservationState{
	ReservationHeld:      {ReservationConfirmed, ReservationCancelled, ReservationExpired},
	ReservationConfirmed: {ReservationActive, ReservationCancelled, ReservationCompleted},
	ReservationActive:    {ReservationCompleted},
	ReservationCompleted: {ReservationSettled},
}

// CanTransition reports whether a reservation may move from one state to another.
func CanTransition(from, to ReservationState) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Limits on reservations.
const (
	// DefaultHoldMinutes is how long an unpaid hold keeps capacity.
	DefaultHoldMinutes = 30
	// MaxUnpaidHolds is how many held reservations one buyer may have at
	// once, to stop speculative flooding.
	MaxUnpaidHolds = 3
)

// ReservationPiece is the part of a reservation on one offer.
type ReservationPiece struct {
	ID            int64
	OfferID       int64
	ProviderID    int64
	Devices       int
	Start         time.Time
	End           time.Time
	Interruptible bool
	PriceCents    Cents // per device-hour, as booked
	// AmountCents is what the buyer pays for this piece: instance cost plus
	// storage and egress, as quoted.
	AmountCents Cents
	// Cancellation policy of the offer at booking time.
	FreeCancelHours int
	CancelFeeBP     int
	// RejectMinutes is the offer's acceptance period at booking time
	// (RejectionWindow).
	RejectMinutes int
	// Terms are the offer's settlement terms at booking time: the piece
	// settles under them whatever the provider changes on the offer later.
	Terms SLATerms
	// Gang is true when the devices are tightly coupled (a training job):
	// one node, or whole nodes of a placement group.
	Gang bool
	// Nodes are the offer's nodes that serve the piece, with the devices
	// held on each (set by the booking; see Commitment).
	Nodes []NodeShare
}

// Commitment returns the capacity the piece holds.
func (p ReservationPiece) Commitment() Commitment {
	return Commitment{OfferID: p.OfferID, Devices: p.Devices, Start: p.Start, End: p.End, Gang: p.Gang, Nodes: p.Nodes}
}

// Reservation is a booking of one quote: every piece of a split, all or
// nothing.
type Reservation struct {
	ID            int64
	BuyerID       int64
	State         ReservationState
	Pieces        []ReservationPiece
	AmountCents   Cents // sum of the pieces' amounts
	HoldExpiresAt time.Time
	// CancelFeeCents is the fee kept when a confirmed booking was cancelled.
	CancelFeeCents Cents
	// RequestJSON is the portable request the quote answered, kept for the record.
	RequestJSON string
	CreatedAt   time.Time
	UpdatedAt   time.Time

	// ExtendsID is the reservation this one continues (an extension: the
	// same pieces from where they end), or 0.
	ExtendsID int64

	// RejectedAt is when the buyer rejected the rental within its
	// acceptance period (zero if not; the state is then cancelled), and
	// RejectReason what they said.
	RejectedAt   time.Time
	RejectReason string

	// ResaleOf is the reservation whose remaining time this one was bought
	// from on resale (see resale.go), or 0; ResoldAt is when this
	// reservation's own remaining time, sold on resale, passed to its buyer
	// (zero if not).
	ResaleOf int64
	ResoldAt time.Time
}

// Start is the earliest piece start.
func (r Reservation) Start() time.Time {
	var t time.Time
	for i, p := range r.Pieces {
		if i == 0 || p.Start.Before(t) {
			t = p.Start
		}
	}
	return t
}

// End is the latest piece end.
func (r Reservation) End() time.Time {
	var t time.Time
	for _, p := range r.Pieces {
		if p.End.After(t) {
			t = p.End
		}
	}
	return t
}

// Devices is the total device count.
func (r Reservation) Devices() int {
	n := 0
	for _, p := range r.Pieces {
		n += p.Devices
	}
	return n
}

// PiecesFromQuote turns a matcher quote into reservation pieces, taking the
// cancellation policy and the settlement terms from the offers (by id). Each piece's amount is its
// instance cost plus storage and egress; orchestration overhead and
// expected failed work are estimates for comparison, not charges.
func PiecesFromQuote(q Quote, offers map[int64]Offer) ([]ReservationPiece, error) {
	out := make([]ReservationPiece, 0, len(q.Pieces))
	for _, p := range q.Pieces {
		o, ok := offers[p.OfferID]
		if !ok {
			return nil, Errorf(CodeConflict, "Offer %d is no longer available; please get fresh quotes.", p.OfferID)
		}
		out = append(out, ReservationPiece{
			OfferID: p.OfferID, ProviderID: o.ProviderID, Devices: p.Devices, Start: p.Start, End: p.End,
			Interruptible: p.Interruptible, PriceCents: p.PriceCents, Gang: p.Gang,
			AmountCents:     p.Cost.Charged(),
			FreeCancelHours: o.FreeCancelHours, CancelFeeBP: o.CancelFeeBP, RejectMinutes: o.RejectMinutes, Terms: TermsOf(o),
		})
	}
	if len(out) == 0 {
		return nil, Errorf(CodeInvalid, "The quote has no pieces.")
	}
	return out, nil
}

// CancellationFee is what a buyer forfeits by cancelling at now: nothing
// for an unpaid hold; for a confirmed booking, each piece's fee once inside
// its offer's free-cancellation period (basis points of the piece amount,
// rounded half away from zero). Started or finished bookings cannot be
// cancelled.
func CancellationFee(r Reservation, now time.Time) (Cents, error) {
	fees, err := CancellationFees(r, now)
	if err != nil {
		return 0, err
	}
	var fee Cents
	for _, f := range fees {
		fee += f
	}
	return fee, nil
}

// CancellationPolicyText describes a piece's cancellation terms.
func CancellationPolicyText(freeHours, feeBP int) string {
	if feeBP == 0 {
		return "Free cancellation until the start."
	}
	return fmt.Sprintf("Free cancellation until %d hours before the start; after that a %s%% fee.", freeHours, FormatPercentBP(feeBP))
}

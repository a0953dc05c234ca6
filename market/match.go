package market

// The matcher, by stage: match.go (what goes in and comes out), compile.go
// (a request compiled into a query, an offer into a slot, and one slot
// judged), engine.go (the walk over the index), gang.go (gang requests),
// split.go (requests split across offers), rank.go (ranking and the
// quotes), explain.go (why offers were rejected, and relaxations).

import (
	"strconv"
	"time"
)

// Candidate is an offer as the matcher sees it: the contract plus the
// provider's record, which is not part of the offer.
type Candidate struct {
	Offer Offer
	// ReliabilityBP is the share of device-days the provider completed
	// without a host failure, in basis points; 0 means unknown and takes
	// DefaultReliabilityBP.
	ReliabilityBP int
	// InterruptionPPMPerHour is the chance per hour (parts per million)
	// that interruptible capacity is preempted; 0 means unknown and takes
	// DefaultInterruptionPPMPerHour. Ignored for on-demand bookings.
	InterruptionPPMPerHour int
}

// Piece is one part of a quote: devices of one offer over [Start, End).
type Piece struct {
	OfferID       int64
	ProviderID    int64
	AcceleratorID string
	RegionID      string
	Devices       int
	Hours         int
	Start         time.Time
	End           time.Time
	Interruptible bool  // booked at the interruptible price
	PriceCents    Cents // per device-hour, as booked
	Cost          CostBreakdown
	EmissionsG    int64
	// Gang is true for a training job's piece: its devices are tightly
	// coupled, so it is placed on one node, or on whole nodes of a
	// placement group (see Commitment).
	Gang bool
}

// Commitment returns the reservation the piece would hold; the booking
// places it on nodes (PlaceCommitments).
func (p Piece) Commitment() Commitment {
	return Commitment{OfferID: p.OfferID, Devices: p.Devices, Start: p.Start, End: p.End, Gang: p.Gang}
}

// Quote is one way to run the request, with its effective cost.
type Quote struct {
	Rank   int // 1 is best
	Pieces []Piece
	Cost   CostBreakdown
	// CentsPerRefDeviceHour is the effective cost per reference-device-hour
	// of work the pieces deliver (devices × hours × relative throughput).
	CentsPerRefDeviceHour Cents
	// EmissionsG estimates grams of CO2e: TDP × devices × hours × the
	// offer's carbon intensity, summed over pieces.
	EmissionsG    int64
	ReliabilityBP int // device-weighted mean of the pieces' providers
	Providers     int
	// Start is the earliest piece's start and End the latest piece's end:
	// the window [Start, End) covers every piece, and it is what the buyer
	// sees. A split's pieces may start at different times (each at its own
	// earliest); the start preference ranks by Start.
	Start time.Time
	End   time.Time
	// Score is the weighted preference score on fixed scales (see
	// scoreUnit; cost relative to the cheapest feasible quote); lower is
	// better. It does not depend on which other offers fit.
	Score int64
	// Exact is false when a split was chosen by the bounded search; then
	// LowerBound is a proven lower bound on the optimal split's cost, so
	// Cost.Total − LowerBound bounds the gap.
	Exact      bool
	LowerBound Cents
}

// EmissionsKg formats the emissions estimate in kg with one decimal.
func (q Quote) EmissionsKg() string {
	return strconv.FormatInt((q.EmissionsG+50)/100/10, 10) + "." + strconv.FormatInt((q.EmissionsG+50)/100%10, 10)
}

// Result is the matcher's answer.
type Result struct {
	Quotes []Quote
	// Total is the number of feasible quotes before Limit was applied;
	// a lower bound ("at least Total") unless Exhaustive.
	Total       int
	Explanation Explanation
	// Exhaustive is true when every offer the request could use was
	// evaluated, so Total and the explanation's counts are exact. It is
	// false when the search stopped early, once no offer left could rank
	// among the quotes (Explanation.Skipped), or a work budget left offers
	// out (Explanation.Cut): then Total, Fit and each Eliminated count are
	// lower bounds, while the quotes are exactly those an exhaustive search
	// ranks first (within the budget's offers, when cut).
	Exhaustive bool
}

// Match runs the engine over candidates and commitments without an index:
// a plain scan. It gives the same result as an Index holding the same data.
func Match(cands []Candidate, commitments []Commitment, req Request, now time.Time) (Result, error) {
	idx := NewIndex()
	for _, c := range commitments {
		idx.AddCommitment(c)
	}
	for _, c := range cands {
		if err := idx.Upsert(c); err != nil {
			return Result{}, err
		}
	}
	return idx.Match(req, now)
}

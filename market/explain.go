package market

// Why offers were rejected (the constraints and their counts) and the
// relaxations that would admit them.

import (
	"fmt"
	"strconv"
	"strings"
)

// Constraint names a hard constraint in explanations, in the order the
// matcher checks them: an offer is counted against the first it fails.
type Constraint string

// Constraints, in checking order.
const (
	ConstraintModel        Constraint = "model"
	ConstraintMemory       Constraint = "memory"
	ConstraintRegion       Constraint = "region"
	ConstraintPrice        Constraint = "price"
	ConstraintOffer        Constraint = "offer"
	ConstraintInterconnect Constraint = "interconnect"
	ConstraintNetwork      Constraint = "network"
	ConstraintSoftware     Constraint = "software"
	ConstraintContainer    Constraint = "container"
	ConstraintVerified     Constraint = "verified"
	ConstraintAgent        Constraint = "agent"
	ConstraintReliability  Constraint = "reliability"
	ConstraintCarbon       Constraint = "carbon"
	ConstraintDevices      Constraint = "devices"
	ConstraintWindow       Constraint = "window"
	ConstraintBooked       Constraint = "booked"
	ConstraintBudget       Constraint = "budget"
	// Relaxation-only names.
	ConstraintInterruption Constraint = "interruption"
	ConstraintDeadline     Constraint = "deadline"
)

var reasons = [...]struct {
	c     Constraint
	label string
}{
	{ConstraintModel, "wrong model"},
	{ConstraintMemory, "too little memory"},
	{ConstraintRegion, "outside the allowed regions"},
	{ConstraintPrice, "over the maximum price"},
	{ConstraintOffer, "not the offers asked for"},
	{ConstraintInterconnect, "interconnect too weak"},
	{ConstraintNetwork, "network too slow"},
	{ConstraintSoftware, "driver or CUDA too old"},
	{ConstraintContainer, "do not run containers"},
	{ConstraintVerified, "no verified figures"},
	{ConstraintAgent, "run no agent"},
	{ConstraintReliability, "reliability too low"},
	{ConstraintCarbon, "carbon intensity too high"},
	{ConstraintDevices, "too few devices"},
	{ConstraintWindow, "not available for the duration in the window"},
	{ConstraintBooked, "fully booked in the window"},
	{ConstraintBudget, "over budget"},
}

const (
	rModel = iota
	rMemory
	rRegion
	rPrice
	rOffer
	rInterconnect
	rNetwork
	rSoftware
	rContainer
	rVerified
	rAgent
	rReliability
	rCarbon
	rDevices
	rWindow
	rBooked
	rBudget
	numReasons
	rFit = -1
)

// Elimination counts the offers a constraint eliminated.
type Elimination struct {
	Constraint Constraint
	Label      string
	Count      int
}

// Relaxation is a change to one constraint that the engine re-ran and
// found to produce quotes.
type Relaxation struct {
	Constraint Constraint
	Message    string // e.g. "raise the maximum price to $2.41 per device-hour: 3 offers"
	Offers     int    // feasible quotes after the change
	// Request is the request with the change applied, so a person can
	// apply the relaxation with one click.
	Request Request
}

// Explanation says why offers were not used.
type Explanation struct {
	Considered int // listed offers looked at
	Fit        int // offers that passed every per-offer constraint
	// Eliminated has one entry per constraint that eliminated offers, most
	// first; the counts plus Fit add up to Considered.
	Eliminated []Elimination
	// Shortfall says why offers that fit could not be combined into a
	// quote (split jobs), or is empty.
	Shortfall string
	// Relaxations are computed by re-running the engine when no quote was
	// found, in the order market.relax tries them (price, budget,
	// deadline, interruption, then the other constraints).
	Relaxations []Relaxation
	// Cut is what a work budget left out (Index.MatchWithin); then
	// Fit, the Eliminated counts and Cut.Unexamined add up to Considered.
	Cut Cut
	// Skipped is the offers a gang or split request's search never evaluated
	// because it stopped early: walking offers from the lowest price, it
	// stops once a bound on the best score any offer left could reach is
	// worse than the last quote's. None of them could rank; some may fit.
	// Fit, the Eliminated counts, Cut.Unexamined and Skipped add up to
	// Considered.
	Skipped int
}

// Summary reads like "0 of 1,240 offers fit: 812 wrong model, 301 too
// little memory", or "at least 12 of 1,240 offers fit: …, 900 not
// evaluated (…)" when the search stopped early.
func (e Explanation) Summary() string {
	var b strings.Builder
	if e.Skipped > 0 {
		b.WriteString("at least ")
	}
	fmt.Fprintf(&b, "%s of %s offers fit", groupThousands(e.Fit), groupThousands(e.Considered))
	for i, el := range e.Eliminated {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s", groupThousands(el.Count), el.Label)
	}
	if n := e.Cut.Unexamined; n > 0 {
		sep := ", "
		if len(e.Eliminated) == 0 {
			sep = ": "
		}
		fmt.Fprintf(&b, "%s%s not examined (over the work budget; the %s with the lowest prices were)", sep, groupThousands(n), groupThousands(e.Cut.Examined))
	}
	if n := e.Skipped; n > 0 {
		sep := ", "
		if len(e.Eliminated) == 0 && e.Cut.Unexamined == 0 {
			sep = ": "
		}
		fmt.Fprintf(&b, "%s%s not evaluated (none of them could rank among the best quotes)", sep, groupThousands(n))
	}
	return b.String()
}

func groupThousands(n int) string {
	s := strconv.Itoa(n)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

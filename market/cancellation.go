package market

import (
	"sort"
	"time"
)

// CancellationSchedule is what cancelling a paid booking of some pieces
// costs over time, under each piece's frozen policy (FreeCancelHours,
// CancelFeeBP): free until the first deadline, then the fee rises at each
// piece's deadline (its start less its free hours) by that piece's fee,
// Share(amount, CancelFeeBP). From the earliest piece's start the booking
// can no longer be cancelled. An unpaid hold is always free to cancel; the
// schedule is what applies once paid. CancellationFees gives the same fee
// at any instant before Closes.
type CancellationSchedule struct {
	// Amount is what the pieces cost: what is paid, and what a cancelled
	// paid booking refunds less the fee.
	Amount Cents
	// Steps are the instants the fee rises, in order; at Steps[i].After the
	// fee is still the previous one (free before the first), and just after
	// it, Steps[i].Fee.
	Steps []CancelStep
	// Closes is the earliest piece's start: no cancellation from then.
	Closes time.Time
}

// CancelStep is one rise of the fee: after After, cancelling costs Fee in
// all (every piece whose deadline has passed).
type CancelStep struct {
	After time.Time
	Fee   Cents
}

// CancellationScheduleOf is the schedule of pieces (a reservation's, or a
// quote's through PiecesFromQuote).
func CancellationScheduleOf(pieces []ReservationPiece) CancellationSchedule {
	var s CancellationSchedule
	type rise struct {
		at  time.Time
		fee Cents
	}
	var rises []rise
	for i, p := range pieces {
		s.Amount += p.AmountCents
		if i == 0 || p.Start.Before(s.Closes) {
			s.Closes = p.Start
		}
		if fee := Share(p.AmountCents, p.CancelFeeBP); fee != 0 {
			rises = append(rises, rise{p.Start.Add(-time.Duration(p.FreeCancelHours) * time.Hour), fee})
		}
	}
	sort.SliceStable(rises, func(i, j int) bool { return rises[i].at.Before(rises[j].at) })
	var total Cents
	for _, r := range rises {
		if !r.at.Before(s.Closes) {
			continue // the booking has started before this fee could apply
		}
		total += r.fee
		if n := len(s.Steps); n > 0 && s.Steps[n-1].After.Equal(r.at) {
			s.Steps[n-1].Fee = total
			continue
		}
		s.Steps = append(s.Steps, CancelStep{After: r.at, Fee: total})
	}
	return s
}

// FeeAt is the fee for cancelling the paid booking at t (before Closes).
func (s CancellationSchedule) FeeAt(t time.Time) Cents {
	var fee Cents
	for _, st := range s.Steps {
		if t.After(st.After) {
			fee = st.Fee
		}
	}
	return fee
}

// FreeUntil is the last instant a paid booking may be cancelled free: the
// first step, or Closes when no fee ever applies.
func (s CancellationSchedule) FreeUntil() time.Time {
	if len(s.Steps) > 0 {
		return s.Steps[0].After
	}
	return s.Closes
}

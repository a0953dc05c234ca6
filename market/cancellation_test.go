package market

import (
	"math/rand"
	"testing"
	"time"
)

func TestCancellationSchedule(t *testing.T) {
	start := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	piece := func(amount Cents, start time.Time, freeHours, bp int) ReservationPiece {
		return ReservationPiece{AmountCents: amount, Start: start, End: start.Add(time.Hour), FreeCancelHours: freeHours, CancelFeeBP: bp}
	}
	for _, tc := range []struct {
		name   string
		pieces []ReservationPiece
		amount Cents
		steps  []CancelStep
		closes time.Time
	}{
		// The booking: $441.00 with a 50% fee inside 48 hours is $220.50.
		{"one piece", []ReservationPiece{piece(44100, start, 48, 5000)}, 44100,
			[]CancelStep{{start.Add(-48 * time.Hour), 22050}}, start},
		{"no fee: free until the start", []ReservationPiece{piece(44100, start, 24, 0)}, 44100, nil, start},
		{"no free hours: free until the start", []ReservationPiece{piece(44100, start, 0, 2500)}, 44100, nil, start},
		// 333 × 25% = 83.25 → 83; 2 × 25% = 0.5 → 1 (half away from zero).
		{"two deadlines add up", []ReservationPiece{piece(333, start, 24, 2500), piece(2, start.Add(time.Hour), 48, 2500)}, 335,
			[]CancelStep{{start.Add(-47 * time.Hour), 1}, {start.Add(-24 * time.Hour), 84}}, start},
		{"the same deadline is one step", []ReservationPiece{piece(1000, start, 24, 1000), piece(3000, start, 24, 5000)}, 4000,
			[]CancelStep{{start.Add(-24 * time.Hour), 1600}}, start},
		// The later piece's deadline falls after the earlier piece has started.
		{"a deadline after the start never applies", []ReservationPiece{piece(1000, start, 24, 1000), piece(3000, start.Add(30*time.Hour), 2, 5000)}, 4000,
			[]CancelStep{{start.Add(-24 * time.Hour), 100}}, start},
	} {
		s := CancellationScheduleOf(tc.pieces)
		if s.Amount != tc.amount || !s.Closes.Equal(tc.closes) || len(s.Steps) != len(tc.steps) {
			t.Errorf("%s: amount %s closes %s steps %+v; want %s, %s, %+v", tc.name, s.Amount, s.Closes, s.Steps, tc.amount, tc.closes, tc.steps)
			continue
		}
		for i, st := range tc.steps {
			if !s.Steps[i].After.Equal(st.After) || s.Steps[i].Fee != st.Fee {
				t.Errorf("%s: step %d is %+v, want %+v", tc.name, i, s.Steps[i], st)
			}
		}
		wantFree := tc.closes
		if len(tc.steps) > 0 {
			wantFree = tc.steps[0].After
		}
		if !s.FreeUntil().Equal(wantFree) {
			t.Errorf("%s: free until %s, want %s", tc.name, s.FreeUntil(), wantFree)
		}
	}
}

// TestCancellationScheduleAgreesWithFees checks FeeAt against a reference
// computed here from each piece's terms (the fee in exact integers, rounded
// half up, as money is) and against CancellationFees, which settles the
// cancellation, at random instants before the start.
func TestCancellationScheduleAgreesWithFees(t *testing.T) {
	rng := rand.New(rand.NewSource(17))
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for n := 0; n < 2000; n++ {
		r := Reservation{State: ReservationConfirmed}
		for i := 0; i < 1+rng.Intn(4); i++ {
			start := base.Add(time.Duration(rng.Intn(96)) * time.Hour)
			r.Pieces = append(r.Pieces, ReservationPiece{AmountCents: Cents(rng.Intn(200000)), Start: start, End: start.Add(time.Hour),
				FreeCancelHours: rng.Intn(72), CancelFeeBP: []int{0, 1, 2500, 5000, 10000}[rng.Intn(5)]})
		}
		s := CancellationScheduleOf(r.Pieces)
		for k := 0; k < 10; k++ {
			at := base.Add(-24*time.Hour + time.Duration(rng.Int63n(int64(s.Closes.Sub(base)+24*time.Hour))))
			if k == 0 && len(s.Steps) > 0 {
				at = s.Steps[0].After // the deadline itself is still free
			}
			var want Cents
			for _, p := range r.Pieces {
				if p.Start.Sub(at) < time.Duration(p.FreeCancelHours)*time.Hour {
					want += Cents((int64(p.AmountCents)*int64(p.CancelFeeBP)*2 + 10000) / 20000)
				}
			}
			fees, err := CancellationFee(r, at)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.FeeAt(at); got != want || got != fees {
				t.Fatalf("pieces %+v at %s: schedule %s, reference %s, CancellationFee %s", r.Pieces, at, got, want, fees)
			}
		}
	}
}

package market

import (
	"strings"
	"testing"
	"time"
)

func TestCheckRejection(t *testing.T) {
	start := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	piece := func(provider int64, start time.Time, minutes int) ReservationPiece {
		return ReservationPiece{ID: provider * 10, ProviderID: provider, Devices: 2, AmountCents: 10000,
			Start: start, End: start.Add(4 * time.Hour), RejectMinutes: minutes}
	}
	res := func(state ReservationState, pieces ...ReservationPiece) Reservation {
		return Reservation{ID: 7, BuyerID: 3, State: state, Pieces: pieces, AmountCents: Cents(10000 * len(pieces))}
	}
	one := res(ReservationActive, piece(1, start, 30))
	for _, tc := range []struct {
		name      string
		r         Reservation
		now       time.Time
		wantUntil time.Time // zero: no window
		wantErr   string    // "" when rejection is allowed
	}{
		{"at the start", one, start, start.Add(30 * time.Minute), ""},
		{"a second before the deadline", one, start.Add(30*time.Minute - time.Second), start.Add(30 * time.Minute), ""},
		{"at the deadline: half-open", one, start.Add(30 * time.Minute), start.Add(30 * time.Minute), "Too late to reject"},
		{"an hour in", one, start.Add(time.Hour), start.Add(30 * time.Minute), "Too late to reject"},
		{"before the start", one, start.Add(-time.Minute), start.Add(30 * time.Minute), "has not started yet"},
		// Not yet advanced to active by the lifecycle, but started.
		{"confirmed, started", res(ReservationConfirmed, piece(1, start, 30)), start.Add(time.Minute), start.Add(30 * time.Minute), ""},
		{"held", res(ReservationHeld, piece(1, start, 30)), start.Add(time.Minute), start.Add(30 * time.Minute), "not paid"},
		{"completed", res(ReservationCompleted, piece(1, start, 30)), start.Add(time.Minute), start.Add(30 * time.Minute), "A completed reservation cannot be rejected"},
		{"cancelled", res(ReservationCancelled, piece(1, start, 30)), start.Add(time.Minute), start.Add(30 * time.Minute), "cannot be rejected"},
		{"settled", res(ReservationSettled, piece(1, start, 30)), start.Add(time.Minute), start.Add(30 * time.Minute), "cannot be rejected"},
		{"no acceptance period", res(ReservationActive, piece(1, start, 0)), start.Add(time.Minute), time.Time{}, "no acceptance period"},
		{"one piece of two without a period", res(ReservationActive, piece(1, start, 30), piece(2, start, 0)), start.Add(time.Minute), time.Time{}, "no acceptance period"},
		// The tightest contract closes the window: 10 minutes, not 60.
		{"the earliest deadline counts", res(ReservationActive, piece(1, start, 60), piece(2, start, 10)), start.Add(10 * time.Minute), start.Add(10 * time.Minute), "Too late"},
		{"within the earliest deadline", res(ReservationActive, piece(1, start, 60), piece(2, start, 10)), start.Add(9 * time.Minute), start.Add(10 * time.Minute), ""},
		// A piece starting later has a later deadline; the window opens at the earliest start.
		{"pieces starting apart", res(ReservationActive, piece(1, start, 30), piece(2, start.Add(time.Hour), 15)), start.Add(20 * time.Minute), start.Add(30 * time.Minute), ""},
		{"no pieces", res(ReservationActive), start, time.Time{}, "no acceptance period"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from, until, ok := RejectionWindow(tc.r)
			if ok != !tc.wantUntil.IsZero() || !until.Equal(tc.wantUntil) {
				t.Errorf("window until %s (ok %v), want %s", until, ok, tc.wantUntil)
			}
			if ok && !from.Equal(tc.r.Start()) {
				t.Errorf("window from %s, want the start %s", from, tc.r.Start())
			}
			err := CheckRejection(tc.r, tc.now, RejectionGrounds{})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.wantErr != "" && err == nil:
				t.Errorf("allowed, want %q", tc.wantErr)
			case tc.wantErr != "" && (ErrorCode(err) != CodeConflict || !strings.Contains(ErrorMessage(err), tc.wantErr)):
				t.Errorf("error %v (code %s), want a conflict saying %q", err, ErrorCode(err), tc.wantErr)
			}
		})
	}
}

func TestRejectionStatement(t *testing.T) {
	start := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	now := start.Add(12 * time.Minute)
	r := Reservation{ID: 9, BuyerID: 4, State: ReservationActive, AmountCents: 12345 + 678 + 1000, Pieces: []ReservationPiece{
		{ID: 1, ProviderID: 20, OfferID: 5, Devices: 4, AmountCents: 12345, Start: start, End: start.Add(8 * time.Hour), RejectMinutes: 30},
		{ID: 2, ProviderID: 21, OfferID: 6, Devices: 1, AmountCents: 678, Start: start, End: start.Add(8 * time.Hour), RejectMinutes: 45},
		{ID: 3, ProviderID: 20, OfferID: 7, Devices: 1, AmountCents: 1000, Start: start, End: start.Add(8 * time.Hour), RejectMinutes: 30},
	}}
	failed := RejectionGrounds{FailedAcceptance: true}
	st, err := RejectionStatement(r, now, 1500, failed)
	if err != nil {
		t.Fatal(err)
	}
	// A failed acceptance test: everything back to the buyer: what each piece cost, nothing kept.
	if !st.Rejected || !st.Cancelled || !st.CancelledAt.Equal(now) {
		t.Errorf("rejected %v cancelled %v at %s", st.Rejected, st.Cancelled, st.CancelledAt)
	}
	if st.Paid != r.AmountCents || st.Refund != r.AmountCents || st.NotCharged != r.AmountCents || st.Kept != 0 || st.Fee != 0 || st.Payout != 0 {
		t.Errorf("paid %s refund %s not charged %s kept %s fee %s payout %s; want all %s back", st.Paid, st.Refund, st.NotCharged, st.Kept, st.Fee, st.Payout, r.AmountCents)
	}
	for i, p := range st.Pieces {
		want := r.Pieces[i].AmountCents
		if p.Paid != want || p.Refund != want || p.Kept != 0 || p.Payout != 0 || len(p.Clauses) != 1 ||
			p.Clauses[0].Kind != ClauseRejection || p.Clauses[0].Cents != want || p.Clauses[0].SLA {
			t.Errorf("piece %d: %+v", i, p)
		}
		if !strings.Contains(p.Clauses[0].Label, "0h 12m after the start") {
			t.Errorf("piece %d label %q", i, p.Clauses[0].Label)
		}
	}
	for _, pp := range st.Payouts() {
		if pp.Payout != 0 || pp.Fee != 0 || pp.Kept != 0 {
			t.Errorf("provider %d is owed %+v", pp.ProviderID, pp)
		}
	}
	// The charge and the settlement's entries leave every account at zero.
	entries, err := ChargeEntries(r, "pi_1", start)
	if err != nil {
		t.Fatal(err)
	}
	entries = append(entries, SettlementEntries(st, now)...)
	if err := CheckSettled(entries, r.ID); err != nil {
		t.Error(err)
	}
	for _, e := range entries {
		if e.Kind == EntryTransfer || e.Kind == EntryFee {
			t.Errorf("a rejected rental moves %s %s", e.Kind, e.Amount)
		}
	}
	// Too late, or a bad fee, is no statement.
	if _, err := RejectionStatement(r, start.Add(30*time.Minute), 1500, failed); ErrorCode(err) != CodeConflict {
		t.Errorf("at the deadline: %v", err)
	}
	if _, err := RejectionStatement(r, now, 10001, failed); ErrorCode(err) != CodeInvalid {
		t.Errorf("fee 100.01%%: %v", err)
	}
}

func TestValidateRejectReason(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		bad      bool
	}{
		{"", "", false},
		{"  throughput 40% below the listing \n", "throughput 40% below the listing", false},
		{"line one\nline two", "line one\nline two", false},
		{strings.Repeat("é", MaxRejectReason), strings.Repeat("é", MaxRejectReason), false},
		{strings.Repeat("x", MaxRejectReason+1), "", true},
		{"bell\a", "", true},
		{"bad \xff byte", "", true},
	} {
		got, err := ValidateRejectReason(tc.in)
		if tc.bad {
			if FieldErrors(err)["reason"] == "" {
				t.Errorf("%q: %v, want a message on reason", tc.in, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestRejectionPolicyText(t *testing.T) {
	for m, want := range map[int]string{
		0:  "No acceptance period: once started, the rental cannot be rejected.",
		1:  "You may reject the rental within the first 1 minute of its start: in full if the agent measured a failed acceptance test or an outage, otherwise paying for the minutes used (at least 10).",
		30: "You may reject the rental within the first 30 minutes of its start: in full if the agent measured a failed acceptance test or an outage, otherwise paying for the minutes used (at least 10).",
		60: "You may reject the rental within the first 1 hour of its start: in full if the agent measured a failed acceptance test or an outage, otherwise paying for the minutes used (at least 10).",
		90: "You may reject the rental within the first 1 hour 30 minutes of its start: in full if the agent measured a failed acceptance test or an outage, otherwise paying for the minutes used (at least 10).",
	} {
		if got := RejectionPolicyText(m); got != want {
			t.Errorf("%d: %q, want %q", m, got, want)
		}
	}
}

// The minutes used, by hand: a piece of 8 hours (480 minutes) for $123.45.
// Its charge is amount × minutes used (rounded up, at least 10, at most
// 480) / 480, rounded half up to the cent.
func TestRejectionCharge(t *testing.T) {
	start := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	p := ReservationPiece{AmountCents: 12345, Start: start, End: start.Add(8 * time.Hour), RejectMinutes: 30}
	for _, tc := range []struct {
		name string
		at   time.Duration
		want Cents
	}{
		{"before the start", -time.Minute, 0},
		{"at the start: the 10-minute minimum", 0, 257},                        // 12345×10/480 = 257.19
		{"9 minutes: the minimum", 9 * time.Minute, 257},                       // 257.19
		{"12 minutes", 12 * time.Minute, 309},                                  // 12345×12/480 = 308.625 → 309
		{"12 minutes 1 second: 13 minutes", 12*time.Minute + time.Second, 334}, // 12345×13/480 = 334.34
		{"29 minutes", 29 * time.Minute, 746},                                  // 12345×29/480 = 745.84
		{"past the end: the whole piece", 9 * time.Hour, 12345},
	} {
		if got := RejectionCharge(p, start.Add(tc.at)); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	// A piece of 5 minutes charges at most its amount.
	short := ReservationPiece{AmountCents: 100, Start: start, End: start.Add(5 * time.Minute)}
	if got := RejectionCharge(short, start.Add(time.Minute)); got != 100 {
		t.Errorf("5-minute piece: %s, want all 100", got)
	}
}

// An unfounded rejection keeps the minutes used for the provider, less the
// fee; the limit, and spot hours, are refused.
func TestUnfoundedRejection(t *testing.T) {
	start := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	now := start.Add(12 * time.Minute)
	r := Reservation{ID: 9, BuyerID: 4, State: ReservationActive, AmountCents: 12345, Pieces: []ReservationPiece{
		{ID: 1, ProviderID: 20, OfferID: 5, Devices: 4, AmountCents: 12345, Start: start, End: start.Add(8 * time.Hour), RejectMinutes: 30}}}
	st, err := RejectionStatement(r, now, 1500, RejectionGrounds{RecentUnfounded: 2})
	if err != nil {
		t.Fatal(err)
	}
	// 309 kept (12 minutes of 480); fee 15% of 309 = 46.35 → 46; payout 263; refund 12036.
	p := st.Pieces[0]
	if p.Kept != 309 || p.Refund != 12036 || p.Fee != 46 || p.Payout != 263 || st.Refund != 12036 || st.Payout != 263 || st.Fee != 46 {
		t.Errorf("kept %s refund %s fee %s payout %s", p.Kept, p.Refund, p.Fee, p.Payout)
	}
	entries, err := ChargeEntries(r, "pi_1", start)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckSettled(append(entries, SettlementEntries(st, now)...), r.ID); err != nil {
		t.Error(err)
	}
	if _, err := RejectionStatement(r, now, 1500, RejectionGrounds{RecentUnfounded: RejectLimit}); ErrorCode(err) != CodeConflict ||
		!strings.Contains(ErrorMessage(err), "the most allowed") {
		t.Errorf("over the limit: %v", err)
	}
	if _, err := RejectionStatement(r, now, 1500, RejectionGrounds{RecentUnfounded: RejectLimit, MeasuredOutage: true}); err != nil {
		t.Errorf("a founded rejection over the limit: %v", err)
	}
	spot := r
	spot.Pieces = []ReservationPiece{r.Pieces[0]}
	spot.Pieces[0].Interruptible = true
	if err := CheckRejection(spot, now, RejectionGrounds{MeasuredOutage: true}); ErrorCode(err) != CodeConflict || !strings.Contains(ErrorMessage(err), "spot") {
		t.Errorf("spot hours with an outage: %v", err)
	}
	if err := CheckRejection(spot, now, RejectionGrounds{FailedAcceptance: true}); err != nil {
		t.Errorf("spot hours with a failed acceptance test: %v", err)
	}
}

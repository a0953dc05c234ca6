package market

import (
	"testing"
	"time"
)

var resaleT0 = time.Date(2026, 5, 4, 8, 0, 0, 0, time.UTC)

func resaleRes(state ReservationState) Reservation {
	return Reservation{ID: 7, BuyerID: 3, State: state, Pieces: []ReservationPiece{
		// 8 devices for 10 h: 19,920¢.
		{ID: 1, OfferID: 11, Devices: 8, Start: resaleT0, End: resaleT0.Add(10 * time.Hour), AmountCents: 19920},
		// 2 devices from 2 h to 5 h: 1,001¢ (an amount that does not divide evenly).
		{ID: 2, OfferID: 12, Devices: 2, Start: resaleT0.Add(2 * time.Hour), End: resaleT0.Add(5 * time.Hour), AmountCents: 1001},
	}, AmountCents: 20921}
}

// The cap is each piece's amount pro rata to the time from `from`, rounded
// down per piece, less refunds; values by hand.
func TestResalePriceCap(t *testing.T) {
	r := resaleRes(ReservationActive)
	for _, tc := range []struct {
		name     string
		from     time.Time
		refunded Cents
		want     Cents
	}{
		{"whole", resaleT0, 0, 19920 + 1001},
		// 9 of 10 h of the first (17,928); all of the second, which starts later (1,001).
		{"one hour in", resaleT0.Add(time.Hour), 0, 17928 + 1001},
		// 7/10 × 19,920 = 13,944; 2/3 × 1,001 = 667.33 → 667.
		{"three hours in", resaleT0.Add(3 * time.Hour), 0, 13944 + 667},
		{"less refunds", resaleT0.Add(3 * time.Hour), 611, 13944 + 667 - 611},
		{"refunds above the cap", resaleT0.Add(3 * time.Hour), 20000, 0},
		// 1/10 × 19,920 = 1,992; the second piece has ended.
		{"last hour", resaleT0.Add(9 * time.Hour), 0, 1992},
	} {
		if got := ResalePriceCap(r, tc.from, tc.refunded); got != tc.want {
			t.Errorf("%s: cap = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestResaleSplit(t *testing.T) {
	for _, tc := range []struct {
		price       Cents
		feeBP       int
		fee, credit Cents
	}{
		{9999, 1000, 1000, 8999}, // 999.9 rounds up
		{10004, 1000, 1000, 9004},
		{10005, 1000, 1001, 9004}, // 1000.5 rounds half away from zero
		{1, 1000, 0, 1},
		{12345, 0, 0, 12345},
		{12345, 10000, 12345, 0},
	} {
		fee, credit := ResaleSplit(tc.price, tc.feeBP)
		if fee != tc.fee || credit != tc.credit || fee+credit != tc.price {
			t.Errorf("split %d at %d bp = %d + %d, want %d + %d", tc.price, tc.feeBP, fee, credit, tc.fee, tc.credit)
		}
	}
}

func TestResaleFromChoices(t *testing.T) {
	// A running reservation at 2:44 in: the first whole hour 15 minutes
	// ahead is 3:00 (2:59 → 3:00); the earliest piece end is 5:00.
	r := resaleRes(ReservationActive)
	now := resaleT0.Add(2*time.Hour + 44*time.Minute)
	got := ResaleFromChoices(r, now)
	if len(got) != 2 || !got[0].Equal(resaleT0.Add(3*time.Hour)) || !got[1].Equal(resaleT0.Add(4*time.Hour)) {
		t.Fatalf("choices = %v, want 3:00 and 4:00 in", got)
	}
	// 2:46 in: 3:01 is past 3:00, so 4:00.
	got = ResaleFromChoices(r, resaleT0.Add(2*time.Hour+46*time.Minute))
	if len(got) != 1 || !got[0].Equal(resaleT0.Add(4*time.Hour)) {
		t.Fatalf("choices at 2:46 = %v, want 4:00", got)
	}
	if err := CheckResaleFrom(r, resaleT0.Add(3*time.Hour+30*time.Minute), now); ErrorCode(err) != CodeInvalid {
		t.Fatalf("half hour: %v, want invalid", err)
	}
	// Not started: only its start, and only 15 minutes ahead.
	c := resaleRes(ReservationConfirmed)
	if got := ResaleFromChoices(c, resaleT0.Add(-15*time.Minute)); len(got) != 1 || !got[0].Equal(resaleT0) {
		t.Fatalf("confirmed choices = %v, want its start", got)
	}
	if got := ResaleFromChoices(c, resaleT0.Add(-14*time.Minute)); len(got) != 0 {
		t.Fatalf("confirmed 14 min ahead = %v, want none", got)
	}
	for _, r := range []Reservation{resaleRes(ReservationHeld), resaleRes(ReservationCompleted),
		func() Reservation { x := resaleRes(ReservationActive); x.ResaleOf = 2; return x }(),
		func() Reservation { x := resaleRes(ReservationActive); x.ResoldAt = resaleT0; return x }(),
		func() Reservation { x := resaleRes(ReservationActive); x.Pieces[1].Interruptible = true; return x }()} {
		if err := CanResell(r); ErrorCode(err) != CodeConflict {
			t.Errorf("CanResell(%s, resale of %d, resold %v) = %v, want conflict", r.State, r.ResaleOf, r.ResoldAt, err)
		}
	}
}

func TestResalePiecesAndAccess(t *testing.T) {
	r := resaleRes(ReservationActive)
	from := resaleT0.Add(3 * time.Hour)
	ps := ResalePieces(r, from)
	if len(ps) != 2 || !ps[0].Start.Equal(from) || !ps[0].End.Equal(resaleT0.Add(10*time.Hour)) || ps[0].AmountCents != 0 || ps[0].ID != 0 ||
		!ps[1].Start.Equal(from) || !ps[1].End.Equal(resaleT0.Add(5*time.Hour)) || ps[1].Devices != 2 || ps[1].OfferID != 12 {
		t.Fatalf("pieces = %+v", ps)
	}
	if r.Pieces[0].AmountCents != 19920 || !r.Pieces[0].Start.Equal(resaleT0) {
		t.Fatal("the original's pieces changed")
	}
	r.ResoldAt = from
	if got := AccessEnd(r, r.Pieces[0]); !got.Equal(from) {
		t.Fatalf("access end = %v, want %v", got, from)
	}
	r.ResoldAt = resaleT0.Add(time.Hour) // before the second piece starts
	if got := AccessEnd(r, r.Pieces[1]); !got.Equal(r.Pieces[1].Start) {
		t.Fatalf("access end of a piece not started = %v, want its start", got)
	}
}

func TestResaleEntriesBalance(t *testing.T) {
	l := ResaleListing{ID: 4, ReservationID: 7, SellerID: 3, BuyerID: 9, Price: 9999, Fee: 1000, Credit: 8999, ChargeRef: "pi_x"}
	es := append(ResaleEntries(l, resaleT0), ResaleCreditEntry(l, "re_y", resaleT0))
	if err := CheckBalanced(es); err != nil {
		t.Fatal(err)
	}
	b := Balance(es)
	if b[BuyerAccount(3)] != 0 || b[BuyerAccount(9)] != 0 || b[AccountPlatformCash] != 1000 || b[AccountPlatformFees] != -1000 {
		t.Fatalf("balances = %v", b)
	}
}

// A listing is a quote source only for requests it answers whole: the
// matcher's checks on its offer (family, residency) and the window, the
// exact device count, and the price limit against the listing's own price.
func TestResaleMatches(t *testing.T) {
	o := plainOffer(11, "nvidia-h100-80gb-sxm", "us-west-or", 8, 249)
	start := t0.Add(24 * time.Hour)
	r := Reservation{ID: 7, BuyerID: 3, State: ReservationActive, Pieces: []ReservationPiece{
		{ID: 1, OfferID: 11, ProviderID: 11, Devices: 8, Start: start, End: start.Add(10 * time.Hour), AmountCents: 19920}}}
	l := ResaleListing{ID: 4, ReservationID: 7, SellerID: 3, From: start.Add(4 * time.Hour), Price: 9600, State: ListingOpen}
	offers := map[int64]Offer{11: o}
	// 9,600¢ for 8 devices × 6 h = 48 device-hours: 200¢ per device-hour.
	base := func() Request {
		return Request{Workload: Workload{Kind: WorkTraining, Devices: 8, Hours: 6},
			Constraints: Constraints{Families: []string{"H100"}, Countries: []string{"US"}, EarliestStart: start}}
	}
	now := start.Add(3 * time.Hour)
	for _, tc := range []struct {
		name string
		edit func(*Request)
		want bool
	}{
		{"fits", func(*Request) {}, true},
		{"shorter job in the window", func(r *Request) { r.Workload.Hours = 2 }, true},
		{"longer than the time left", func(r *Request) { r.Workload.Hours = 7 }, false},
		{"other family", func(r *Request) { r.Constraints.Families = []string{"A100"} }, false},
		{"residency elsewhere", func(r *Request) { r.Constraints.Countries = []string{"DE"} }, false},
		{"fewer devices", func(r *Request) { r.Workload.Devices = 4 }, false},
		{"deadline before the end of the job", func(r *Request) { r.Constraints.Deadline = start.Add(9 * time.Hour) }, false},
		{"price limit at the listing's rate", func(r *Request) { r.Constraints.MaxPricePerDeviceHour = 200 }, true},
		{"price limit under it", func(r *Request) { r.Constraints.MaxPricePerDeviceHour = 199 }, false},
		{"budget under the price", func(r *Request) { r.Constraints.BudgetCents = 9599 }, false},
	} {
		req := base()
		tc.edit(&req)
		if got := ResaleMatches(l, r, offers, nil, req, now); got != tc.want {
			t.Errorf("%s: matches = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestResalePricePerDeviceHour(t *testing.T) {
	start := time.Date(2026, 12, 4, 5, 0, 0, 0, time.UTC)
	twelve := []ReservationPiece{{Devices: 2, Start: start, End: start.Add(12 * time.Hour)}} // 24 device-hours
	for _, c := range []struct {
		price Cents
		want  Cents
	}{{1000, 42}, {960, 40}, {961, 41}} { // 41.67 up to 42; exactly 40; 40.04 up to 41
		if got, ok := ResalePricePerDeviceHour(c.price, twelve); !ok || got != c.want {
			t.Errorf("%d¢ over 24 device-hours: %d¢, %v; want %d¢", c.price, got, ok, c.want)
		}
	}
	if _, ok := ResalePricePerDeviceHour(1000, nil); ok {
		t.Error("no pieces: a price per device-hour")
	}
}

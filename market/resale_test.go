package market

import (
	"math/rand/v2"
	"strings"
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

// SettleResold splits each piece at the sale's start and settles each
// part on its own; values by hand. resaleRes's pieces, completed, sold
// from 3 h in: piece 1 (provider 21) splits into the seller's 3 h,
// 19,920 − 13,944 = 5,976¢ for 24 device-hours, and the holder's 7 h,
// 19,920 × 7/10 = 13,944¢ for 56; piece 2 (provider 22) into the seller's
// 2 h–3 h, 1,001 − 667 = 334¢ for 2 device-hours, and the holder's 3 h–5 h,
// 1,001 × 2/3 = 667.33 → 667¢ for 4. Terms: wall clock, 99.5% guaranteed,
// 10% credit below 99.5%, 25% below 99%, cap 50%; platform fee 10%.
func TestSettleResold(t *testing.T) {
	r := resaleRes(ReservationCompleted)
	r.Pieces[0].ProviderID, r.Pieces[1].ProviderID = 21, 22
	from := resaleT0.Add(3 * time.Hour)
	terms := SLATerms{BillingBasis: BillingWallClock, UptimeBP: 9950, CreditCapBP: 5000,
		CreditSchedule: []CreditTier{{BelowBP: 9950, CreditBP: 1000}, {BelowBP: 9900, CreditBP: 2500}}}
	// 4 of 8 devices down from 2 h to 4 h on piece 1, across the sale's start.
	across := Incident{ID: 1, PieceID: 1, Kind: IncidentHostFailure, Start: resaleT0.Add(2 * time.Hour), End: resaleT0.Add(4 * time.Hour),
		DevicesAffected: 4, Note: "PSU", Acknowledged: true}
	// 1 of 2 devices missing on piece 2 for all of the holder's part.
	fewer := Incident{ID: 2, PieceID: 2, Kind: IncidentFewerDevices, Start: from, End: resaleT0.Add(5 * time.Hour),
		DevicesAffected: 1, Note: "one short", Acknowledged: true}
	unacked := Incident{ID: 3, PieceID: 1, Kind: IncidentHostFailure, Start: resaleT0.Add(6 * time.Hour), End: resaleT0.Add(7 * time.Hour),
		DevicesAffected: 8, Note: "reported", Acknowledged: false}
	for _, tc := range []struct {
		name                          string
		incs                          []Incident
		price, sellerRefunded         Cents
		holderRefunded                Cents
		refund, resale, withheld, fee Cents
		pieceRefunds                  [2]Cents
		pending                       int
	}{
		// Nothing happened: fees 10% of 19,920 = 1,992 and of 1,001 = 100.1 → 100.
		{name: "clean", price: 10000, sellerRefunded: 9000, fee: 1992 + 100},
		// Seller's part: 4 of 24 device-hours lost, 5,976 × 4/24 = 996;
		// uptime 83.33% → 25%, 1,494; 2,490 under its cap of 2,988.
		// Holder's part: 4 of 56, 13,944 × 4/56 = 996; uptime 92.86% → 25%,
		// 3,486; 4,482 under 6,972. Refund 6,972: piece 1 keeps 12,948, fee
		// 1,294.8 → 1,295; piece 2's fee 100.
		{name: "across the start", incs: []Incident{across}, price: 10000, sellerRefunded: 9000,
			refund: 6972, resale: 4482, fee: 1295 + 100, pieceRefunds: [2]Cents{6972, 0}},
		// The holder paid 3,000 and had 500 back: 2,500 is theirs, the other
		// 1,982 goes to the seller (2,490 + 1,982 = 4,472).
		{name: "holder's cap", incs: []Incident{across}, price: 3000, sellerRefunded: 9000, holderRefunded: 500,
			refund: 6972, resale: 2500, fee: 1295 + 100, pieceRefunds: [2]Cents{6972, 0}},
		// Only 20,921 − 17,921 = 3,000 is left on the seller's payment: of
		// the 4,472 owed them 1,472 is withheld, all off piece 1 (the only
		// refund): piece 1 refunds 5,500, keeps 14,420, fee 1,442.
		{name: "seller's cap", incs: []Incident{across}, price: 3000, sellerRefunded: 17921, holderRefunded: 500,
			refund: 5500, resale: 2500, withheld: 1472, fee: 1442 + 100, pieceRefunds: [2]Cents{5500, 0}},
		// Piece 2's holder part: 2 of 4 device-hours missing; the 25% tier
		// first, Share(667, 25%) = 166.75 → 167, then with the pro rata
		// 667 × (2,500×4 + 10,000×2)/(4×10,000) = 500.25 → 500; capped at
		// Share(667, 50%) = 333.5 → 334. Piece 2 keeps 667, fee 66.7 → 67.
		// The unacknowledged report is pending, not counted.
		{name: "holder's part capped by the terms", incs: []Incident{fewer, unacked}, price: 10000, sellerRefunded: 9000,
			refund: 334, resale: 334, fee: 1992 + 67, pieceRefunds: [2]Cents{0, 334}, pending: 1},
	} {
		in := SettlementInput{Reservation: r, Terms: map[int64]SLATerms{11: terms, 12: terms}, Incidents: tc.incs, PlatformFeeBP: 1000}
		st, err := SettleResold(in, ResaleSettlement{ListingID: 5, HolderID: 9, From: from, Price: tc.price,
			SellerRefunded: tc.sellerRefunded, HolderRefunded: tc.holderRefunded})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if st.Refund != tc.refund || st.ResaleCredit != tc.resale || st.RefundWithheld != tc.withheld || st.Fee != tc.fee ||
			st.Pieces[0].Refund != tc.pieceRefunds[0] || st.Pieces[1].Refund != tc.pieceRefunds[1] || len(st.Pending) != tc.pending {
			t.Errorf("%s: refund %d resale %d withheld %d fee %d pieces %d/%d pending %v; want %d %d %d %d %v %d",
				tc.name, st.Refund, st.ResaleCredit, st.RefundWithheld, st.Fee, st.Pieces[0].Refund, st.Pieces[1].Refund, st.Pending,
				tc.refund, tc.resale, tc.withheld, tc.fee, tc.pieceRefunds, tc.pending)
		}
		if st.Paid != 20921 || st.Refund+st.Fee+st.Payout != st.Paid || st.ResaleBuyerID != 9 || st.ResaleListingID != 5 {
			t.Errorf("%s: paid %d = refund %d + fee %d + payout %d? holder %d listing %d", tc.name, st.Paid, st.Refund, st.Fee, st.Payout,
				st.ResaleBuyerID, st.ResaleListingID)
		}
		if seller := st.Refund - st.ResaleCredit; seller > max(r.AmountCents-tc.sellerRefunded, 0) {
			t.Errorf("%s: the seller is refunded %d, more than the %d left on their payment", tc.name, seller, r.AmountCents-tc.sellerRefunded)
		}
	}
}

// Whatever the incidents, price and earlier refunds, a resold statement
// balances, refunds each party at most what is left on their payment,
// and never refunds a piece more than it paid.
func TestSettleResoldCapsHold(t *testing.T) {
	r := resaleRes(ReservationCompleted)
	r.Pieces[0].ProviderID, r.Pieces[1].ProviderID = 21, 22
	terms := SLATerms{BillingBasis: BillingWallClock, UptimeBP: 9950, CreditCapBP: 10000,
		CreditSchedule: []CreditTier{{BelowBP: 9950, CreditBP: 5000}, {BelowBP: 5000, CreditBP: 10000}}}
	rng := rand.New(rand.NewPCG(7, 22))
	for n := 0; n < 2000; n++ {
		from := resaleT0.Add(time.Duration(rng.IntN(5)) * time.Hour)
		var incs []Incident
		for k := range rng.IntN(4) {
			p := r.Pieces[rng.IntN(2)]
			hours := int(p.End.Sub(p.Start) / time.Hour)
			s := rng.IntN(hours)
			e := s + 1 + rng.IntN(hours-s)
			incs = append(incs, Incident{ID: int64(k + 1), PieceID: p.ID, Kind: []IncidentKind{IncidentHostFailure, IncidentFewerDevices, IncidentNetworkDegradation}[rng.IntN(3)], Start: p.Start.Add(time.Duration(s) * time.Hour),
				End: p.Start.Add(time.Duration(e) * time.Hour), DevicesAffected: 1 + rng.IntN(p.Devices), Note: "x", Acknowledged: true})
		}
		sale := ResaleSettlement{From: from, Price: Cents(1 + rng.IntN(15000)), SellerRefunded: Cents(rng.IntN(21000)), HolderRefunded: Cents(rng.IntN(3000))}
		st, err := SettleResold(SettlementInput{Reservation: r, Terms: map[int64]SLATerms{11: terms, 12: terms}, Incidents: incs, PlatformFeeBP: 1000}, sale)
		if err != nil {
			t.Fatalf("%+v %+v: %v", sale, incs, err)
		}
		var refunds Cents
		for _, p := range st.Pieces {
			if p.Refund < 0 || p.Refund > p.Paid || p.Refund+p.Fee+p.Payout != p.Paid {
				t.Fatalf("%+v %+v: piece %+v", sale, incs, p)
			}
			refunds += p.Refund
		}
		seller := st.Refund - st.ResaleCredit
		if refunds != st.Refund || st.Refund+st.Fee+st.Payout != 20921 || st.ResaleCredit < 0 || seller < 0 ||
			st.ResaleCredit > max(sale.Price-sale.HolderRefunded, 0) || seller > max(20921-sale.SellerRefunded, 0) {
			t.Fatalf("%+v %+v: refund %d (pieces %d) resale %d seller %d fee %d payout %d", sale, incs, st.Refund, refunds, st.ResaleCredit, seller, st.Fee, st.Payout)
		}
	}
}

// A reservation that starts off the hour (an ASAP booking, an extension)
// can be sold whole before its start, from its start; not once its start
// is less than ResaleMargin ahead (issue 31 item 4).
func TestResaleFromOffTheHour(t *testing.T) {
	start := resaleT0.Add(37*time.Minute + 12*time.Second)
	r := Reservation{ID: 8, BuyerID: 3, State: ReservationConfirmed, Pieces: []ReservationPiece{
		{ID: 1, OfferID: 11, Devices: 4, Start: start, End: start.Add(3 * time.Hour), AmountCents: 3000}}, AmountCents: 3000}
	got := ResaleFromChoices(r, start.Add(-time.Hour))
	if len(got) != 1 || !got[0].Equal(start) {
		t.Fatalf("choices an hour ahead = %v, want [%v]", got, start)
	}
	if err := CheckResaleFrom(r, start, start.Add(-time.Hour)); err != nil {
		t.Errorf("from its off-hour start: %v", err)
	}
	if got := ResaleFromChoices(r, start.Add(-ResaleMargin+time.Second)); len(got) != 0 {
		t.Errorf("choices %v less than %v ahead, want none", got, ResaleMargin)
	}
}

// The holder of resold time reports incidents only in the hours they
// hold: a piece sold whole is a conflict, and a time in the resold hours
// says by the field that those are reported on the resale buyer's
// reservation, not "within the booking".
func TestValidateHeldIncident(t *testing.T) {
	r := resaleRes(ReservationActive)
	r.ResoldAt = resaleT0.Add(3 * time.Hour)
	in := func(piece int64, from, to time.Duration) *Incident {
		return &Incident{PieceID: piece, Kind: IncidentHostFailure, Start: resaleT0.Add(from), End: resaleT0.Add(to), DevicesAffected: 1, Note: "host down; ticket 9"}
	}
	if err := ValidateHeldIncident(in(1, time.Hour, 2*time.Hour), r, r.Pieces[0]); err != nil {
		t.Errorf("an incident in the held hours: %v", err)
	}
	err := ValidateHeldIncident(in(1, 2*time.Hour, 4*time.Hour), r, r.Pieces[0])
	if f := FieldErrors(err); !strings.Contains(f["end"], "resold time begins") || f["start"] != "" {
		t.Errorf("an incident ending in the resold hours: %v", f)
	}
	err = ValidateHeldIncident(in(1, 4*time.Hour, 5*time.Hour), r, r.Pieces[0])
	if f := FieldErrors(err); !strings.Contains(f["start"], "resold time begins") {
		t.Errorf("an incident in the resold hours: %v", f)
	}
	r.ResoldAt = resaleT0 // sold whole at its start
	if err := ValidateHeldIncident(in(1, time.Hour, 2*time.Hour), r, r.Pieces[0]); ErrorCode(err) != CodeConflict {
		t.Errorf("an incident on a piece sold whole: %v, want a conflict", err)
	}
}

package market

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRequestPinnedToOffers: a request pinned to offers is quoted from
// those only, the others are counted against "offer" (after price), and
// the relaxation drops the pin; the pin survives the portable JSON and bad
// pins are refused.
func TestRequestPinnedToOffers(t *testing.T) {
	const h100 = "nvidia-h100-80gb-sxm"
	cands := []Candidate{
		{Offer: plainOffer(1, h100, "us-west-or", 8, 100)},
		{Offer: plainOffer(2, h100, "us-west-or", 8, 200)},
		{Offer: plainOffer(3, h100, "us-west-or", 8, 300)},
		{Offer: plainOffer(4, h100, "us-west-or", 8, 900)},
	}
	req := jobOf(WorkBatch, 4)
	req.Constraints.OfferIDs = []int64{2}
	req.Constraints.MaxPricePerDeviceHour = 500
	res, err := Match(cands, nil, req, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got := quotedOffers(res); !slices.Equal(got, []int64{2}) {
		t.Fatalf("pinned to 2, quoted %v", got)
	}
	el := map[Constraint]int{}
	for _, e := range res.Explanation.Eliminated {
		el[e.Constraint] = e.Count
	}
	if !reflect.DeepEqual(el, map[Constraint]int{ConstraintOffer: 2, ConstraintPrice: 1}) || res.Explanation.Fit != 1 || res.Explanation.Considered != 4 {
		t.Fatalf("explanation %+v: want 2 not asked for, 1 over price, 1 fit of 4", res.Explanation)
	}

	// Pinned to an offer that is fully booked: the relaxation quotes any offer.
	full := Commitment{OfferID: 2, Devices: 8, Start: t0, End: t0.Add(48 * time.Hour), Nodes: []NodeShare{{Node: 0, Devices: 8}}}
	res, err = Match(cands, []Commitment{full}, req, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Quotes) != 0 {
		t.Fatalf("booked pinned offer quoted: %v", quotedOffers(res))
	}
	var relaxed *Relaxation
	for i, r := range res.Explanation.Relaxations {
		if r.Constraint == ConstraintOffer {
			relaxed = &res.Explanation.Relaxations[i]
		}
	}
	if relaxed == nil || relaxed.Request.Constraints.OfferIDs != nil || relaxed.Offers != 2 || !strings.Contains(relaxed.Message, "any offer") {
		t.Fatalf("relaxations %+v: want one quoting any offer (1 and 3)", res.Explanation.Relaxations)
	}

	b, err := EncodeRequestJSON(req)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeRequestJSON(b)
	if err != nil || !slices.Equal(back.Constraints.OfferIDs, []int64{2}) || !strings.Contains(string(b), `"offers": [`) {
		t.Fatalf("round trip: %v, %v\n%s", err, back.Constraints.OfferIDs, b)
	}

	many := make([]int64, MaxRequestOffers+1)
	for i := range many {
		many[i] = int64(i + 1)
	}
	for _, ids := range [][]int64{{0}, {-3}, {5, 5}, many} {
		r := jobOf(WorkBatch, 1)
		r.Constraints.OfferIDs = ids
		if err := ValidateRequest(&r); FieldErrors(err)["constraints.offers"] == "" {
			t.Errorf("offers %v: no message for constraints.offers: %v", ids, err)
		}
	}
}

// TestFreeForAndNextFree: what the catalogue shows and filters on is
// counted node by node, within the offer's window and rental limits.
func TestFreeForAndNextFree(t *testing.T) {
	o := nodeOffer(7, 2, 8, false, 200) // two 8-device nodes, 1 to 720 h, 30 days from t0
	o.MinRentalHours = 2
	// Node 0 is wholly booked for the first day; node 1 has 3 devices
	// booked over hours 4 to 10.
	cs := []Commitment{
		{OfferID: 7, Devices: 8, Start: t0, End: t0.Add(24 * time.Hour), Gang: true, Nodes: []NodeShare{{Node: 0, Devices: 8}}},
		{OfferID: 7, Devices: 3, Start: t0.Add(4 * time.Hour), End: t0.Add(10 * time.Hour), Nodes: []NodeShare{{Node: 1, Devices: 3}}},
		{OfferID: 99, Devices: 8, Start: t0, End: t0.Add(100 * time.Hour)}, // another offer: ignored
	}
	for _, tc := range []struct {
		name   string
		w      FreeWindow
		spread int
		ok     bool
	}{
		{"now for the shortest rental", FreeWindow{}, 8, true},
		{"now for 5 hours meets node 1's booking", FreeWindow{Hours: 5}, 5, true},
		{"a past start counts from now", FreeWindow{From: t0.Add(-time.Hour), Hours: 2}, 8, true},
		{"after the first day", FreeWindow{From: t0.Add(24 * time.Hour), Hours: 24}, 16, true},
		{"shorter than the minimum rental", FreeWindow{Hours: 1}, 8, false},
		{"past the availability window", FreeWindow{From: t0.Add(29 * 24 * time.Hour), Hours: 48}, 0, false},
	} {
		a, ok := FreeFor(o, cs, tc.w, t0)
		if a.Spread != tc.spread || ok != tc.ok {
			t.Errorf("%s: spread %d, ok %t; want %d, %t", tc.name, a.Spread, ok, tc.spread, tc.ok)
		}
	}

	s := OfferSearch{Free: &FreeWindow{Hours: 5}}
	if !s.FreeAdmits(o, cs, t0) {
		t.Error("5 free for 5 hours: not admitted")
	}
	s.Devices = Range{Min: 6}
	if s.FreeAdmits(o, cs, t0) {
		t.Error("devices>=6 with only 5 free for 5 hours: admitted")
	}
	if !(OfferSearch{Devices: Range{Min: 6}}).FreeAdmits(o, cs, t0) {
		t.Error("a search without a window refused an offer")
	}

	if at, ok := NextFree(o, cs, t0); !ok || !at.Equal(t0) {
		t.Errorf("NextFree with node 1 free = %s, %t; want t0", at, ok)
	}
	both := append(slices.Clone(cs), Commitment{OfferID: 7, Devices: 8, Start: t0, End: t0.Add(6 * time.Hour), Nodes: []NodeShare{{Node: 1, Devices: 8}}})
	// Node 1 is full until hour 6, then 3 are booked to hour 10: 5 free from hour 6.
	if at, ok := NextFree(o, both, t0); !ok || !at.Equal(t0.Add(6*time.Hour)) {
		t.Errorf("NextFree with both nodes full = %s, %t; want hour 6", at, ok)
	}
	late := o
	late.AvailableFrom = t0.Add(48 * time.Hour)
	if at, ok := NextFree(late, nil, t0); !ok || !at.Equal(late.AvailableFrom) {
		t.Errorf("NextFree before the window opens = %s, %t; want its opening", at, ok)
	}
	gone := Commitment{OfferID: 7, Devices: 16, Start: t0, End: o.AvailableUntil, Nodes: []NodeShare{{Node: 0, Devices: 8}, {Node: 1, Devices: 8}}}
	if at, ok := NextFree(o, []Commitment{gone}, t0); ok {
		t.Errorf("NextFree on an offer booked to its end = %s", at)
	}
}

// TestFreeWindowQuery: "available" and "hours" compile to the search's
// free window, each named once, with units and messages naming the token.
func TestFreeWindowQuery(t *testing.T) {
	dec1 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		q    string
		from time.Time
		h    int
	}{
		{"available=now", time.Time{}, 0},
		{"available=2026-12-01", dec1, 0},
		{`from="2026-12-01 09:30" for=8h`, dec1.Add(9*time.Hour + 30*time.Minute), 8},
		{`free_from="2026-12-01T09:00" hours=2d`, dec1.Add(9 * time.Hour), 48},
		{"hours=24", time.Time{}, 24},
	} {
		s, err := ParseSearch(tc.q)
		if err != nil {
			t.Fatalf("%q: %v", tc.q, err)
		}
		if s.Free == nil || !s.Free.From.Equal(tc.from) || s.Free.Hours != tc.h {
			t.Errorf("%q: free %+v; want from %s for %d h", tc.q, s.Free, tc.from, tc.h)
		}
	}
	for _, tc := range []struct{ q, token, want string }{
		{"available=tomorrow", "tomorrow", "a date such as"},
		{"available=now from=2026-12-01", "2026-12-01", "named twice"},
		{"hours=1.5", "1.5", "whole number of hours"},
		{"hours=0", "0", "whole number of hours"},
		{"hours>5", ">", "operator"},
		{"for=3w", "3w", "number of hours"},
	} {
		_, err := ParseSearch(tc.q)
		msg := ErrorMessage(err)
		if ErrorCode(err) != CodeInvalid || !strings.Contains(msg, "“"+tc.token+"”") || !strings.Contains(msg, tc.want) || !strings.Contains(msg, "At character") {
			t.Errorf("%q: %v; want a message at “%s” expecting %q", tc.q, err, tc.token, tc.want)
		}
	}
	// The form writes its datetime-local value back as a query that reads the same.
	c := NewCondition("available", "=", "2026-12-01T09:00")
	back, err := ParseSearch(FormatQuery([]Condition{c}))
	if err != nil || back.Free == nil || !back.Free.From.Equal(dec1.Add(9*time.Hour)) {
		t.Errorf("written back as %q: %+v, %v", FormatQuery([]Condition{c}), back.Free, err)
	}
}

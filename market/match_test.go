package market

import (
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"
)

// plainOffer is a listed single-node offer with no extras: no provisioning
// time, whole-hour rentals over 30 days from t0.
func plainOffer(id int64, acc, region string, devices int, price Cents) Offer {
	a, _ := FindAccelerator(acc)
	return Offer{
		ID: id, ProviderID: id, Title: "offer", AcceleratorID: acc, MemoryGB: a.MemoryGB,
		DevicesPerNode: devices, Nodes: 1, Interconnect: InterconnectPCIe, NetworkID: "ethernet-25",
		CPUCores: 32, RAMGB: 256, StorageGB: 1000, DriverVersion: "550.54", CUDAVersion: "12.4",
		OSImage: "Ubuntu 22.04", ContainerRuntime: "Docker", RegionID: region, CarbonGPerKWh: 100,
		AvailableFrom: t0, AvailableUntil: t0.Add(30 * 24 * time.Hour), MinRentalHours: 1, MaxRentalHours: 720,
		PriceCentsPerDeviceHour: price, BillingBasis: BillingWallClock, UptimeBP: 9900,
		Review: ReviewApproved, State: OfferActive,
	}
}

func oneDeviceJob(kind WorkloadKind) Request {
	return Request{Workload: Workload{Kind: kind, Devices: 1, Hours: 1}}
}

// quotedOffers returns the offer ids of every piece of every quote, sorted.
func quotedOffers(res Result) []int64 {
	var ids []int64
	for _, q := range res.Quotes {
		for _, p := range q.Pieces {
			ids = append(ids, p.OfferID)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

func sameIDs(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestResidencyAndModelListsNarrow: allowed countries are the data
// residency rule and hold for every quote, regions narrow within them; a
// region outside them is invalid, naming both fields. Families and model
// ids work the same way.
func TestResidencyAndModelListsNarrow(t *testing.T) {
	const h100, a100, l4 = "nvidia-h100-80gb-sxm", "nvidia-a100-80gb-sxm", "nvidia-l4-24gb-pcie"
	cands := []Candidate{
		{Offer: plainOffer(1, h100, "us-east-va", 1, 100)},
		{Offer: plainOffer(2, h100, "us-west-or", 1, 100)},
		{Offer: plainOffer(3, h100, "eu-central-de", 1, 100)},
		{Offer: plainOffer(4, a100, "eu-central-de", 1, 100)},
		{Offer: plainOffer(5, l4, "eu-central-de", 1, 100)},
	}
	for _, tc := range []struct {
		name                          string
		countries, regions            []string
		families, accelerators        []string
		want                          []int64  // quoted offers
		wantFields                    []string // invalid: these fields, no others
		wantRegionMsg, wantCountryMsg string   // substrings of the field messages
	}{
		{name: "countries alone", countries: []string{"DE"}, want: []int64{3, 4, 5}},
		{name: "regions alone", regions: []string{"us-east-va", "eu-central-de"}, want: []int64{1, 3, 4, 5}},
		{name: "a region narrows its country", countries: []string{"US"}, regions: []string{"us-east-va"}, want: []int64{1}},
		{name: "a country without a listed region adds nothing", countries: []string{"US", "DE"}, regions: []string{"us-east-va"}, want: []int64{1}},
		{name: "region outside the countries", countries: []string{"DE"}, regions: []string{"us-east-va"},
			wantFields: []string{"constraints.countries", "constraints.regions"}, wantRegionMsg: "US East (Virginia)", wantCountryMsg: "US East (Virginia)"},
		{name: "families alone", families: []string{"H100", "A100"}, want: []int64{1, 2, 3, 4}},
		{name: "a model narrows its family", families: []string{"H100", "A100"}, accelerators: []string{a100}, want: []int64{4}},
		{name: "model outside the families", families: []string{"H100"}, accelerators: []string{l4},
			wantFields: []string{"constraints.accelerators", "constraints.families"}},
		{name: "both rules at once", countries: []string{"DE"}, regions: []string{"eu-central-de"}, families: []string{"H100"},
			accelerators: []string{h100}, want: []int64{3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := oneDeviceJob(WorkBatch)
			req.Constraints.Countries, req.Constraints.RegionIDs = tc.countries, tc.regions
			req.Constraints.Families, req.Constraints.AcceleratorIDs = tc.families, tc.accelerators
			req.Limit = MaxQuoteLimit
			res, err := Match(cands, nil, req, t0)
			if tc.wantFields != nil {
				fields := FieldErrors(err)
				if ErrorCode(err) != CodeInvalid || len(fields) != len(tc.wantFields) {
					t.Fatalf("err %v, want invalid naming %v", err, tc.wantFields)
				}
				for _, f := range tc.wantFields {
					if fields[f] == "" {
						t.Fatalf("no message for %s: %v", f, fields)
					}
				}
				if !strings.Contains(fields["constraints.regions"], tc.wantRegionMsg) || !strings.Contains(fields["constraints.countries"], tc.wantCountryMsg) {
					t.Fatalf("messages %v do not name the region", fields)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := quotedOffers(res); !sameIDs(got, tc.want) {
				t.Fatalf("quoted offers %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRegionRelaxationKeepsResidency: the "allow any region" relaxation
// drops the regions but never the allowed countries.
func TestRegionRelaxationKeepsResidency(t *testing.T) {
	cands := []Candidate{
		{Offer: plainOffer(1, "nvidia-h100-80gb-sxm", "us-west-or", 1, 100)},
		{Offer: plainOffer(2, "nvidia-h100-80gb-sxm", "eu-central-de", 1, 100)},
	}
	req := oneDeviceJob(WorkTraining)
	req.Constraints.Countries, req.Constraints.RegionIDs = []string{"US"}, []string{"us-east-va"}
	res, err := Match(cands, nil, req, t0)
	if err != nil || len(res.Quotes) != 0 {
		t.Fatalf("%v, %d quotes", err, len(res.Quotes))
	}
	var found bool
	for _, rl := range res.Explanation.Relaxations {
		if rl.Constraint != ConstraintRegion {
			continue
		}
		found = true
		c := rl.Request.Constraints
		if len(c.RegionIDs) != 0 || !sameStrings(c.Countries, []string{"US"}) || rl.Offers != 1 ||
			!strings.Contains(rl.Message, "allowed countries") {
			t.Fatalf("region relaxation %+v", rl)
		}
		again, err := Match(cands, nil, rl.Request, t0)
		if err != nil || !sameIDs(quotedOffers(again), []int64{1}) {
			t.Fatalf("relaxed request: %v, offers %v", err, quotedOffers(again))
		}
	}
	if !found {
		t.Fatalf("no region relaxation: %+v", res.Explanation.Relaxations)
	}
	// Countries alone: no relaxation may leave them.
	req.Constraints.RegionIDs = nil
	req.Constraints.Countries = []string{"FR"}
	res, err = Match(cands, nil, req, t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, rl := range res.Explanation.Relaxations {
		if !sameStrings(rl.Request.Constraints.Countries, []string{"FR"}) {
			t.Fatalf("relaxation %+v widens the allowed countries", rl)
		}
	}
}

func sameStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestSplitStartIsWhatRanks: a split quote's Start is its earliest piece's
// start, and the start preference ranks by that Start.
func TestSplitStartIsWhatRanks(t *testing.T) {
	const l4 = "nvidia-l4-24gb-pcie"
	cands := []Candidate{
		{Offer: plainOffer(1, l4, "us-east-va", 1, 100)}, // free now
		{Offer: plainOffer(2, l4, "us-east-va", 1, 100)}, // free from +5 h
		{Offer: plainOffer(3, l4, "us-east-va", 2, 500)}, // both devices free from +2 h
	}
	commits := []Commitment{
		{OfferID: 2, Devices: 1, Start: t0, End: t0.Add(5 * time.Hour)},
		{OfferID: 3, Devices: 1, Start: t0, End: t0.Add(2 * time.Hour)},
	}
	req := Request{Workload: Workload{Kind: WorkBatch, Devices: 2, Hours: 1}, Limit: MaxQuoteLimit}
	req.Preferences.StartWeight = 100
	res, err := Match(cands, commits, req, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Quotes) != 2 {
		t.Fatalf("%d quotes, want the combination 1+2 and offer 3 alone", len(res.Quotes))
	}
	for i, q := range res.Quotes {
		earliest := q.Pieces[0].Start
		for _, p := range q.Pieces {
			if p.Start.Before(earliest) {
				earliest = p.Start
			}
		}
		if !q.Start.Equal(earliest) {
			t.Errorf("quote %d starts %s, its earliest piece %s", i+1, q.Start, earliest)
		}
		if i > 0 && q.Start.Before(res.Quotes[i-1].Start) {
			t.Errorf("ranked by start, quote %d (%s) comes after quote %d (%s)", i+1, q.Start, i, res.Quotes[i-1].Start)
		}
	}
	if first := res.Quotes[0]; len(first.Pieces) != 2 || !first.Start.Equal(t0) {
		t.Errorf("first quote %+v, want the combination starting now", first)
	}
}

// TestBoundedSplitLowerBoundHolds is the case: 1,506 devices in
// pieces of at least 502 over three 504-device offers, where the only
// split is 502 on each. The bounded search's LowerBound must not exceed
// that optimum, priced by the independent reference.
func TestBoundedSplitLowerBoundHolds(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for i := range 3000 {
		var cands []Candidate
		w := Workload{Kind: WorkBatch, Devices: 1506, MinPieceDevices: 502, Hours: 1 + rng.IntN(48),
			CheckpointMins: rng.IntN(120), RestartMins: rng.IntN(30)}
		// Alike offers leave the LP bound closest to the optimum, so the
		// rounding of the pieces' cost lines decides.
		price, prov, rel := Cents(100+rng.IntN(900)), rng.IntN(60), 9000+rng.IntN(1000)
		for id := int64(1); id <= 3; id++ {
			o := plainOffer(id, "nvidia-a100-80gb-sxm", "us-east-va", 8, price)
			o.Nodes, o.PlacementGroup, o.NetworkID = 63, true, "infiniband-400"
			o.ProvisioningMins = prov
			cands = append(cands, Candidate{Offer: o, ReliabilityBP: rel})
		}
		res, err := Match(cands, nil, Request{Workload: w}, t0)
		if err != nil || len(res.Quotes) != 1 {
			t.Fatalf("instance %d: %v, %d quotes", i, err, len(res.Quotes))
		}
		var opt int64
		for _, c := range cands {
			opt += int64(refPieceCost(w, c, 502, w.Hours, false).Total)
		}
		q := res.Quotes[0]
		if q.Exact || int64(q.Cost.Total) != opt || int64(q.LowerBound) > opt {
			t.Fatalf("instance %d (%+v, price %s, provisioning %d min, reliability %d): exact %t, cost %d, bound %d, optimum %d",
				i, w, price, prov, rel, q.Exact, q.Cost.Total, q.LowerBound, opt)
		}
	}
}

// TestSplitDeadlineRelaxationIsEarliestEnd is the repro: the
// suggested deadline is the earliest end of any feasible split, not the
// cheapest split's end.
func TestSplitDeadlineRelaxationIsEarliestEnd(t *testing.T) {
	const l4 = "nvidia-l4-24gb-pcie"
	cands := []Candidate{
		{Offer: plainOffer(1, l4, "us-east-va", 1, 100)},
		{Offer: plainOffer(2, l4, "us-east-va", 1, 100)},
		{Offer: plainOffer(3, l4, "us-east-va", 1, 300)},
	}
	commits := []Commitment{{OfferID: 2, Devices: 1, Start: t0, End: t0.Add(10 * time.Hour)}}
	req := Request{Workload: Workload{Kind: WorkBatch, Devices: 2, Hours: 2}}
	req.Constraints.Deadline = t0.Add(time.Hour)
	res, err := Match(cands, commits, req, t0)
	if err != nil || len(res.Quotes) != 0 {
		t.Fatalf("%v, %d quotes", err, len(res.Quotes))
	}
	var rl *Relaxation
	for i := range res.Explanation.Relaxations {
		if res.Explanation.Relaxations[i].Constraint == ConstraintDeadline {
			rl = &res.Explanation.Relaxations[i]
		}
	}
	want := t0.Add(2 * time.Hour)
	if rl == nil || !rl.Request.Constraints.Deadline.Equal(want) || rl.Offers != 1 ||
		!strings.Contains(rl.Message, "1 Dec 2025 02:00 UTC") {
		t.Fatalf("deadline relaxation %+v, want %s", rl, want)
	}
	again, err := Match(cands, commits, rl.Request, t0)
	if err != nil || len(again.Quotes) != 1 || again.Quotes[0].Cost.Total != 800 || !sameIDs(quotedOffers(again), []int64{1, 3}) {
		t.Fatalf("at the suggested deadline: %v, %+v", err, again.Quotes)
	}
}

// TestSubSecondTimesAgreeWithFitsCapacity: times are normalised once, so
// with sub-second now, availability and commitments every piece starts at
// or after now and its offer's availability, does not overlap a
// commitment, and FitsCapacity accepts it.
func TestSubSecondTimesAgreeWithFitsCapacity(t *testing.T) {
	const h100 = "nvidia-h100-80gb-sxm"
	late := plainOffer(1, h100, "us-east-va", 1, 100)
	late.AvailableFrom = t0.Add(10*time.Hour + 500*time.Millisecond)
	busy := plainOffer(2, h100, "us-west-or", 1, 100)
	free := plainOffer(3, h100, "eu-central-de", 1, 100)
	commits := []Commitment{{OfferID: 2, Devices: 1, Start: t0, End: t0.Add(2*time.Hour + 500*time.Millisecond)}}
	cands := []Candidate{{Offer: late}, {Offer: busy}, {Offer: free}}
	offers := map[int64]Offer{1: late, 2: busy, 3: free}
	now := t0.Add(300 * time.Millisecond)
	for _, es := range []time.Time{{}, t0.Add(10 * time.Hour), t0.Add(10*time.Hour + 700*time.Millisecond)} {
		for _, kind := range []WorkloadKind{WorkTraining, WorkBatch} {
			req := oneDeviceJob(kind)
			req.Constraints.EarliestStart = es
			req.Constraints.Deadline = t0.Add(20*time.Hour + 999*time.Millisecond)
			req.Limit = MaxQuoteLimit
			res, err := Match(cands, commits, req, now)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Quotes) != 3 {
				t.Fatalf("%s from %s: %d quotes", kind, es, len(res.Quotes))
			}
			for _, q := range res.Quotes {
				for _, p := range q.Pieces {
					o := offers[p.OfferID]
					if p.Start.Before(now) || p.Start.Before(es) || p.Start.Before(o.AvailableFrom) || p.End.After(req.Constraints.Deadline) {
						t.Errorf("%s from %s: piece %s–%s on offer %d outside now %s, earliest start, availability %s",
							kind, es, p.Start, p.End, p.OfferID, now, o.AvailableFrom)
					}
					if p.OfferID == 2 && p.Start.Before(commits[0].End) {
						t.Errorf("piece at %s overlaps the commitment ending %s", p.Start, commits[0].End)
					}
					if err := FitsCapacity(o, commits, []Commitment{p.Commitment()}); err != nil {
						t.Errorf("%s from %s: FitsCapacity refuses the quoted piece %s–%s on offer %d: %v", kind, es, p.Start, p.End, p.OfferID, err)
					}
				}
			}
		}
	}
}

// TestTieLeavesMoreSellable: between quotes equal in cost, start and
// providers, the one whose placement keeps fewer devices out of sale
// ranks first, and only then the tightest fit. Values by hand, on 16
// devices each: a 12-device gang holds two whole 8-device nodes of a
// placement group (16 held, 0 left to sell) or 12 of one 16-device node
// (12 held, 4 left to sell); a 4-device gang holds 4 either way, and best
// fit takes the 8-device node that has 4 free (0 left on it) over the
// wholly free 16-device node (12 left on it).
func TestTieLeavesMoreSellable(t *testing.T) {
	twoEights := plainOffer(1, "nvidia-h100-80gb-sxm", "us-west-or", 8, 300)
	twoEights.Nodes, twoEights.PlacementGroup, twoEights.NetworkID = 2, true, "infiniband-400"
	oneSixteen := plainOffer(2, "nvidia-h100-80gb-sxm", "us-west-or", 16, 300)
	// Node 0 of the 8-device offer has 4 devices held, for the second row;
	// node 1 stays wholly free, so both rows' 12-device gangs fit.
	busy := Commitment{OfferID: 1, Devices: 4, Start: t0, End: t0.Add(48 * time.Hour), Gang: true,
		Nodes: []NodeShare{{Node: 0, Devices: 4}}}
	for _, tc := range []struct {
		name     string
		devices  int
		commits  []Commitment
		order    []int64 // offer ids, best first
		sellable []int   // devices the offer still sells beside the booking (FreeDevices.Spread), by quote
	}{
		// 16 held against 12: the 16-device node, though two whole nodes fit tighter.
		{name: "12 on whole nodes or one node", devices: 12, order: []int64{2, 1}, sellable: []int{4, 0}},
		// 4 held either way: best fit on the 8-device node (4 free → 0), not the 16 (16 free → 12).
		{name: "4, best fit", devices: 4, commits: []Commitment{busy}, order: []int64{1, 2}, sellable: []int{8, 12}},
	} {
		cands := []Candidate{{Offer: twoEights, ReliabilityBP: 9900}, {Offer: oneSixteen, ReliabilityBP: 9900}}
		req := Request{Workload: Workload{Kind: WorkTraining, Devices: tc.devices, Hours: 2}, Limit: 2}
		res, err := Match(cands, tc.commits, req, t0)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(res.Quotes) != 2 {
			t.Fatalf("%s: %d quotes, want 2 (%s)", tc.name, len(res.Quotes), res.Explanation.Summary())
		}
		for i, q := range res.Quotes {
			p := q.Pieces[0]
			if p.OfferID != tc.order[i] {
				t.Fatalf("%s: quote %d on offer %d, want %d", tc.name, i+1, p.OfferID, tc.order[i])
			}
			if q.Cost.Total != res.Quotes[0].Cost.Total || !q.Start.Equal(t0) {
				t.Fatalf("%s: quote %d costs %v from %v; the tie needs %v from %v", tc.name, i+1, q.Cost.Total, q.Start, res.Quotes[0].Cost.Total, t0)
			}
			o := twoEights
			if p.OfferID == 2 {
				o = oneSixteen
			}
			placed, err := PlaceCommitments(o, tc.commits, []Commitment{p.Commitment()})
			if err != nil {
				t.Fatalf("%s: quote %d does not book: %v", tc.name, i+1, err)
			}
			after := append(append([]Commitment(nil), tc.commits...), placed[0])
			if got := FreeDevices(o, after, p.Start, p.End).Spread; got != tc.sellable[i] {
				t.Fatalf("%s: quote %d leaves %d devices to sell on offer %d, want %d", tc.name, i+1, got, p.OfferID, tc.sellable[i])
			}
		}
	}
}

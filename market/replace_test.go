package market

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// replOffer is a listed offer of provider with nodes × dpn devices of
// H100 in region at price, no provisioning time, so its effective cost
// is its instance cost.
func replOffer(id, provider int64, region string, nodes, dpn int, price Cents, group bool) Offer {
	o := plainOffer(id, "nvidia-h100-80gb-sxm", region, dpn, price)
	o.ProviderID, o.Nodes, o.PlacementGroup = provider, nodes, group
	if nodes > 1 {
		o.NetworkID = "roce-200"
	}
	return o
}

func TestRematchOrderAndPieces(t *testing.T) {
	start, until := t0.Add(2*time.Hour), t0.Add(12*time.Hour)
	from := t0.Add(9*time.Hour + 30*time.Minute) // 2.5 h left: matched as 3 h, booked for 2.5
	gang4 := ReservationPiece{ID: 100, OfferID: 1, ProviderID: 7, Devices: 4, Start: start, End: until, Gang: true,
		Nodes: []NodeShare{{Node: 0, Devices: 4}}}
	own := gang4.Commitment()
	own.ID = gang4.ID
	o1 := replOffer(1, 7, "eu-north-se", 2, 4, 300, true)
	o2 := replOffer(2, 7, "eu-north-se", 1, 4, 200, false)
	o3 := replOffer(3, 8, "us-west-or", 1, 4, 100, false)
	o4 := replOffer(4, 9, "eu-north-se", 3, 4, 250, true)
	minRental := o2
	minRental.MinRentalHours = 3
	train := Request{Workload: Workload{Kind: WorkTraining, Devices: 4, Hours: 10}}
	inSweden := train
	inSweden.Constraints.Countries = []string{"SE"}
	other := Commitment{ID: 200, OfferID: 1, Devices: 4, Start: t0, End: t0.Add(20 * time.Hour), Gang: true, Nodes: []NodeShare{{Node: 1, Devices: 4}}}
	gang8 := gang4
	gang8.Devices, gang8.Nodes = 8, []NodeShare{{Node: 0, Devices: 4}, {Node: 1, Devices: 4}}
	own8 := gang8.Commitment()
	own8.ID = gang8.ID
	// Option: tier, then per piece offer, devices, nodes and amount.
	type piece struct {
		offer   int64
		devices int
		nodes   []NodeShare
		amount  Cents
	}
	type option struct {
		tier   ReplacementTier
		pieces []piece
	}
	tests := []struct {
		name    string
		req     Request
		p       ReservationPiece
		failed  int
		cands   []Offer
		commits []Commitment
		want    []option
	}{
		{"same offer's other node first, then the provider, then anyone", train, gang4, 0, []Offer{o1, o2, o3}, []Commitment{own},
			[]option{
				{TierSameOffer, []piece{{1, 4, []NodeShare{{1, 4}}, 4 * 300 * 5 / 2}}},
				{TierSameProvider, []piece{{2, 4, []NodeShare{{0, 4}}, 4 * 200 * 5 / 2}}},
				{TierAnyone, []piece{{3, 4, []NodeShare{{0, 4}}, 4 * 100 * 5 / 2}}},
			}},
		{"the other node taken: the provider's other offer", train, gang4, 0, []Offer{o1, o2, o3}, []Commitment{own, other},
			[]option{
				{TierSameProvider, []piece{{2, 4, []NodeShare{{0, 4}}, 2000}}},
				{TierAnyone, []piece{{3, 4, []NodeShare{{0, 4}}, 1000}}},
			}},
		{"residency holds: the cheap offer abroad is not used", inSweden, gang4, 0, []Offer{o1, o2, o3}, []Commitment{own},
			[]option{
				{TierSameOffer, []piece{{1, 4, []NodeShare{{1, 4}}, 3000}}},
				{TierSameProvider, []piece{{2, 4, []NodeShare{{0, 4}}, 2000}}},
			}},
		{"a failed node of the piece's own healthy nodes: the piece's own hold does not block", train, gang4, 1, []Offer{o1}, []Commitment{own},
			[]option{{TierSameOffer, []piece{{1, 4, []NodeShare{{0, 4}}, 3000}}}}},
		{"a gang of two nodes moves whole to another placement group", Request{Workload: Workload{Kind: WorkTraining, Devices: 8, Hours: 10}},
			gang8, 1, []Offer{o1, o2, o3, o4}, []Commitment{own8},
			[]option{{TierAnyone, []piece{{4, 8, []NodeShare{{0, 4}, {1, 4}}, 8 * 250 * 5 / 2}}}}},
		{"a minimum rental longer than what is left leaves the offer out", train, gang4, 0, []Offer{o1, minRental}, []Commitment{own, other}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var cands []Candidate
			for _, o := range tc.cands {
				cands = append(cands, Candidate{Offer: o, ReliabilityBP: 9900})
			}
			res, err := Rematch(RematchInput{Request: tc.req, Piece: tc.p, FailedNode: tc.failed, From: from, Until: until,
				Candidates: cands, Commitments: tc.commits})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Options) != len(tc.want) {
				t.Fatalf("options = %d, want %d: %+v", len(res.Options), len(tc.want), res.Options)
			}
			for i, w := range tc.want {
				got := res.Options[i]
				if got.Tier != w.tier || len(got.Pieces) != len(w.pieces) {
					t.Fatalf("option %d: tier %d with %d pieces, want tier %d with %d", i, got.Tier, len(got.Pieces), w.tier, len(w.pieces))
				}
				for j, wp := range w.pieces {
					gp := got.Pieces[j]
					if gp.OfferID != wp.offer || gp.Devices != wp.devices || gp.AmountCents != wp.amount ||
						!gp.Start.Equal(from) || !gp.End.Equal(until) || gp.Gang != tc.p.Gang || len(gp.Nodes) != len(wp.nodes) {
						t.Fatalf("option %d piece %d = %+v, want %+v over [%s, %s)", i, j, gp, wp, from, until)
					}
					for k := range wp.nodes {
						if gp.Nodes[k] != wp.nodes[k] {
							t.Fatalf("option %d piece %d nodes %v, want %v", i, j, gp.Nodes, wp.nodes)
						}
					}
				}
			}
			if res.Explanation.Considered != len(tc.cands) {
				t.Errorf("explanation considered %d, want %d", res.Explanation.Considered, len(tc.cands))
			}
		})
	}
}

func TestRematchSplitPieceByPiece(t *testing.T) {
	start, until := t0.Add(time.Hour), t0.Add(9*time.Hour)
	from := t0.Add(5 * time.Hour) // 4 whole hours left
	p := ReservationPiece{ID: 5, OfferID: 7, ProviderID: 13, Devices: 4, Start: start, End: until, Nodes: []NodeShare{{Node: 0, Devices: 4}}}
	cands := []Candidate{
		{Offer: replOffer(5, 11, "eu-north-se", 1, 2, 100, false)},
		{Offer: replOffer(6, 12, "eu-north-se", 1, 2, 120, false)},
		{Offer: replOffer(7, 13, "eu-north-se", 1, 4, 90, false)},
	}
	req := Request{Workload: Workload{Kind: WorkBatch, Devices: 12, MinPieceDevices: 2, Hours: 8}}
	res, err := Rematch(RematchInput{Request: req, Piece: p, FailedNode: 0, From: from, Until: until, Candidates: cands})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Options) == 0 {
		t.Fatal("no option")
	}
	o := res.Options[0]
	if o.Tier != TierAnyone || len(o.Pieces) != 2 {
		t.Fatalf("first option = %+v", o)
	}
	got := map[int64]Cents{}
	for _, pc := range o.Pieces {
		if pc.Devices != 2 || pc.Gang {
			t.Fatalf("piece %+v: want 2 loose devices", pc)
		}
		got[pc.OfferID] = pc.AmountCents
	}
	if got[5] != 2*100*4 || got[6] != 2*120*4 || len(got) != 2 {
		t.Fatalf("amounts by offer = %v, want 5: 800, 6: 960", got)
	}
	h100, _ := FindAccelerator("nvidia-h100-80gb-sxm")
	if o.Amount() != 1760 || o.RefDeviceHoursMilli != 4*4*h100.RelativeThroughputPermille() {
		t.Fatalf("amount %s, ref %d", o.Amount(), o.RefDeviceHoursMilli)
	}
}

func TestRematchNothingFitsExplains(t *testing.T) {
	start, until := t0, t0.Add(10*time.Hour)
	p := ReservationPiece{ID: 1, OfferID: 1, ProviderID: 1, Devices: 4, Start: start, End: until, Gang: true, Nodes: []NodeShare{{Node: 0, Devices: 4}}}
	cands := []Candidate{{Offer: replOffer(1, 1, "eu-north-se", 1, 4, 300, false)}, {Offer: replOffer(2, 2, "eu-north-se", 1, 2, 300, false)}}
	res, err := Rematch(RematchInput{Request: Request{Workload: Workload{Kind: WorkTraining, Devices: 4, Hours: 10}}, Piece: p,
		From: t0.Add(4 * time.Hour), Until: until, Candidates: cands})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Options) != 0 || res.Explanation.Considered != 2 || res.Explanation.Fit != 0 {
		t.Fatalf("options %d, explanation %+v", len(res.Options), res.Explanation)
	}
	if s := res.Explanation.Summary(); !strings.Contains(s, "0 of 2") {
		t.Fatalf("summary %q", s)
	}
	if _, _, why, ok := ChooseReplacement(p, t0.Add(4*time.Hour), res.Options, 0); ok || why == "" {
		t.Fatalf("chose something: %q", why)
	}
}

func TestReplacementMoney(t *testing.T) {
	s := t0
	piece := func(amount Cents, hours int, capBP int) ReservationPiece {
		return ReservationPiece{Devices: 4, Start: s, End: s.Add(time.Duration(hours) * time.Hour), AmountCents: amount,
			Terms: SLATerms{BillingBasis: BillingWallClock, UptimeBP: 9900, CreditCapBP: capBP}}
	}
	const refMilli = 16_000 // 16 reference device-hours
	tests := []struct {
		name       string
		p          ReservationPiece
		from       time.Time
		cost       Cents
		maxPremium Cents
		want       ReplacementSplit
		refused    bool
	}{
		// 10 h for $100.00; 4 h left are $40.00 of it.
		{"cheaper refunds the difference", piece(10000, 10, 1000), s.Add(6 * time.Hour), 3000, 0,
			ReplacementSplit{Remaining: 4000, Delivered: 6000, Cost: 3000, Refund: 1000}, false},
		{"the same cost moves nothing else", piece(10000, 10, 1000), s.Add(6 * time.Hour), 4000, 0,
			ReplacementSplit{Remaining: 4000, Delivered: 6000, Cost: 4000}, false},
		{"dearer within the provider's cap", piece(10000, 10, 1000), s.Add(6 * time.Hour), 4500, 0,
			ReplacementSplit{Remaining: 4000, Delivered: 6000, Cost: 4500, ProviderShare: 500}, false},
		// Cap 10 % of $100 = $10; $8 more is 16 ref-DH × 50 ¢.
		{"past the cap the buyer pays up to the premium", piece(10000, 10, 1000), s.Add(6 * time.Hour), 5800, 50,
			ReplacementSplit{Remaining: 4000, Delivered: 6000, Cost: 5800, ProviderShare: 1000, BuyerShare: 800}, false},
		{"a cent over the premium is not booked", piece(10000, 10, 1000), s.Add(6 * time.Hour), 5801, 50, ReplacementSplit{}, true},
		{"no premium, no cap: only as dear as paid", piece(10000, 10, 0), s.Add(6 * time.Hour), 4001, 0, ReplacementSplit{}, true},
		// Half an hour delivered of ten: $5.00; a full cap is still bounded by it.
		{"the provider's share is bounded by what it delivered", piece(10000, 10, 10000), s.Add(30 * time.Minute), 12000, 200,
			ReplacementSplit{Remaining: 9500, Delivered: 500, Cost: 12000, ProviderShare: 500, BuyerShare: 2000}, false},
		// 2 of 3 hours of $10.00: 666.67 ¢ rounds down to 666.
		{"the remaining time's share rounds down", piece(1000, 3, 0), s.Add(time.Hour), 600, 0,
			ReplacementSplit{Remaining: 666, Delivered: 334, Cost: 600, Refund: 66}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReplacementMoney(tc.p, tc.from, tc.cost, refMilli, tc.maxPremium)
			if tc.refused {
				if ErrorCode(err) != CodeConflict {
					t.Fatalf("err = %v, want a conflict", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("split = %+v, want %+v", got, tc.want)
			}
			// Money in equals money out: paid + buyer's share = delivered − provider's share + cost + refund.
			if tc.p.AmountCents+got.BuyerShare != got.OriginalAmount()+got.Cost+got.Refund {
				t.Fatalf("identity fails: %+v", got)
			}
		})
	}
	if _, err := ReplacementMoney(piece(100, 1, 0), s.Add(2*time.Hour), 10, 0, 0); ErrorCode(err) != CodeInvalid {
		t.Fatalf("from after the piece: %v", err)
	}
}

func TestChooseReplacementTakesFirstAffordable(t *testing.T) {
	p := ReservationPiece{Devices: 1, Start: t0, End: t0.Add(2 * time.Hour), AmountCents: 200}
	dear := ReplacementOption{Tier: TierSameOffer, Pieces: []ReservationPiece{{AmountCents: 150}}, RefDeviceHoursMilli: 1000}
	fine := ReplacementOption{Tier: TierAnyone, Pieces: []ReservationPiece{{AmountCents: 90}}, RefDeviceHoursMilli: 1000}
	opt, split, _, ok := ChooseReplacement(p, t0.Add(time.Hour), []ReplacementOption{dear, fine}, 0)
	if !ok || opt.Tier != TierAnyone || split.Refund != 10 {
		t.Fatalf("chose %+v %+v %v", opt, split, ok)
	}
	opt, split, _, ok = ChooseReplacement(p, t0.Add(time.Hour), []ReplacementOption{dear, fine}, 50)
	if !ok || opt.Tier != TierSameOffer || split.BuyerShare != 50 {
		t.Fatalf("with a premium chose %+v %+v %v", opt, split, ok)
	}
}

func TestReplacementPolicyValidationAndJSON(t *testing.T) {
	base := Request{Workload: Workload{Kind: WorkTraining, Devices: 1, Hours: 1}}
	for _, tc := range []struct {
		r     Replacement
		field string
	}{
		{Replacement{}, ""},
		{Replacement{Policy: ReplaceAuto, MaxPremium: 25}, ""},
		{Replacement{Policy: "sometimes"}, "replacement.policy"},
		{Replacement{Policy: ReplaceAsk, MaxPremium: -1}, "replacement.max_premium_cents"},
		{Replacement{Policy: ReplaceAsk, MaxPremium: MaxReplacementPremium + 1}, "replacement.max_premium_cents"},
	} {
		r := base
		r.Replacement = tc.r
		err := ValidateRequest(&r)
		var e *Error
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%+v: %v", tc.r, err)
		case tc.field != "" && (!errors.As(err, &e) || e.Fields[tc.field] == ""):
			t.Errorf("%+v: err %v, want field %s", tc.r, err, tc.field)
		}
	}
	r := base
	r.Replacement = Replacement{Policy: ReplaceAuto, MaxPremium: 25}
	js, err := EncodeRequestJSON(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"policy": "auto"`) || !strings.Contains(string(js), `"max_premium_cents": 25`) {
		t.Fatalf("json %s", js)
	}
	back, err := DecodeRequestJSON(js)
	if err != nil || back.Replacement != r.Replacement {
		t.Fatalf("decoded %+v, %v", back.Replacement, err)
	}
	// The default is left out, and an old document without it reads as never.
	js, _ = EncodeRequestJSON(base)
	if strings.Contains(string(js), "replacement") {
		t.Fatalf("default encoded: %s", js)
	}
	back, err = DecodeRequestJSON(js)
	if err != nil || back.Replacement.Effective() != ReplaceNever {
		t.Fatalf("old document: %+v %v", back.Replacement, err)
	}
	if _, err := DecodeRequestJSON([]byte(`{"version":1,"workload":{"kind":"training","devices":1,"hours":1},"constraints":{},"preferences":{},"replacement":{"policy":"maybe"}}`)); err == nil {
		t.Fatal("a bad policy decoded")
	}
}

func TestTriggersReplacement(t *testing.T) {
	p := ReservationPiece{Start: t0, End: t0.Add(2 * time.Hour)}
	for _, tc := range []struct {
		kind  IncidentKind
		agent bool
		now   time.Time
		want  bool
	}{
		{IncidentHostFailure, true, t0.Add(time.Hour), true},
		{IncidentFewerDevices, true, t0.Add(time.Hour), true},
		{IncidentHostFailure, false, t0.Add(time.Hour), false},                             // a buyer's report alone
		{IncidentNetworkDegradation, true, t0.Add(time.Hour), false},                       // not a failure
		{IncidentHostFailure, true, t0.Add(-time.Minute), false},                           // before the piece
		{IncidentHostFailure, true, t0.Add(2*time.Hour - MinReplacementWindow), true},      // just enough left
		{IncidentHostFailure, true, t0.Add(2*time.Hour - MinReplacementWindow + 1), false}, // too little left
	} {
		if got := TriggersReplacement(tc.kind, tc.agent, p, tc.now); got != tc.want {
			t.Errorf("%s agent=%v at %s: %v, want %v", tc.kind, tc.agent, tc.now, got, tc.want)
		}
	}
}

// refReplacementRequest restates the documented re-match request: the
// piece's devices over the window's whole hours from its start, a gang as
// training, no budget.
func refReplacementRequest(orig Request, devices int, gang bool, from time.Time, hours int) Request {
	r := orig
	r.Workload.Devices, r.Workload.Hours, r.Workload.WorkDeviceHours, r.Workload.WorkModelID = devices, hours, 0, ""
	if gang {
		r.Workload.Kind, r.Workload.MinPieceDevices = WorkTraining, 0
	} else if orig.Workload.MinPieceDevices > devices {
		r.Workload.MinPieceDevices = devices
	}
	r.Constraints.EarliestStart, r.Constraints.Deadline, r.Constraints.BudgetCents = from, from.Add(time.Duration(hours)*time.Hour), 0
	return r
}

// TestRematchAgainstReference: on random instances the first option is in
// the first tier (same offer, same provider, anyone) where the brute-force
// reference finds a quote, at the reference's optimal cost there, with the
// failed node held; no option's piece is on the failed node; options come
// in tier order; no option when no tier has a quote.
func TestRematchAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 2026))
	found, none := 0, 0
	var byTier [3]int
	for i := range 1500 {
		kind := []WorkloadKind{WorkTraining, WorkBatch}[i%2]
		in := randomInstance(rng, kind)
		failed := in.cands[rng.IntN(len(in.cands))].Offer
		node := rng.IntN(failed.Nodes)
		hours := 1 + rng.IntN(4)
		from := t0.Add(time.Duration(12+rng.IntN(6)) * time.Hour) // inside every random offer's window
		until := from.Add(time.Duration(hours) * time.Hour)
		devices := in.req.Workload.Devices
		gang := kind == WorkTraining
		p := ReservationPiece{OfferID: failed.ID, ProviderID: failed.ProviderID, Devices: devices, Start: from.Add(-time.Hour), End: until, Gang: gang}
		req := in.req
		res, err := Rematch(RematchInput{Request: req, Piece: p, FailedNode: node, From: from, Until: until, Candidates: in.cands, Commitments: in.commits})
		if err != nil {
			t.Fatalf("instance %d: %v", i, err)
		}
		block := Commitment{OfferID: failed.ID, Devices: failed.DevicesPerNode, Start: from, End: until, Nodes: []NodeShare{{Node: node, Devices: failed.DevicesPerNode}}}
		ref := instance{commits: append(append([]Commitment(nil), in.commits...), block), now: from,
			req: refReplacementRequest(req, devices, gang, from, hours)}
		var tiers [3][]Candidate
		for _, c := range in.cands {
			switch {
			case c.Offer.ID == failed.ID:
				tiers[0] = append(tiers[0], c)
			case c.Offer.ProviderID == failed.ProviderID:
				tiers[1] = append(tiers[1], c)
			}
		}
		tiers[2] = in.cands
		wantTier, wantCost := 0, int64(-1)
		for k, cs := range tiers {
			if len(cs) == 0 {
				continue
			}
			ref.cands = cs
			if r := refSolve(ref); r.best >= 0 {
				wantTier, wantCost = k+1, r.best
				break
			}
		}
		if wantTier == 0 {
			none++
			if len(res.Options) != 0 {
				t.Fatalf("instance %d: reference finds nothing, rematch %+v", i, res.Options[0])
			}
			continue
		}
		found++
		byTier[wantTier-1]++
		if len(res.Options) == 0 {
			t.Fatalf("instance %d: reference finds tier %d at %d, rematch nothing", i, wantTier, wantCost)
		}
		first := res.Options[0]
		if int(first.Tier) != wantTier || int64(first.Quote.Cost.Total) != wantCost {
			t.Fatalf("instance %d: first option tier %d cost %d, want tier %d cost %d", i, first.Tier, first.Quote.Cost.Total, wantTier, wantCost)
		}
		last := ReplacementTier(0)
		for _, o := range res.Options {
			if o.Tier < last {
				t.Fatalf("instance %d: tiers out of order", i)
			}
			last = o.Tier
			devs := 0
			for _, pc := range o.Pieces {
				devs += pc.Devices
				for _, sh := range pc.Nodes {
					if pc.OfferID == failed.ID && sh.Node == node {
						t.Fatalf("instance %d: placed on the failed node: %+v", i, pc)
					}
				}
			}
			if devs != devices {
				t.Fatalf("instance %d: option holds %d devices, want %d", i, devs, devices)
			}
		}
	}
	t.Logf("coverage: %d found (by tier %v), %d none", found, byTier, none)
	if found < 100 || none < 20 || byTier[0] < 10 || byTier[1] < 10 || byTier[2] < 10 {
		t.Fatalf("coverage too thin")
	}
}

// The buyer's share of a dearer replacement is charged to them and owed
// to the pieces ReplacementEntries leaves unpaid, last pieces first to
// lack: two pieces of 1,000¢ (provider 8) and 500¢ (provider 9), the
// failing provider 7 passing 1,200¢, the buyer 300¢ — all on piece 2.
// With everything balanced, each provider ends owed its piece's amount.
func TestReplacementChargeEntries(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := Reservation{ID: 5, BuyerID: 3}
	pieces := []ReservationPiece{{ID: 41, ProviderID: 8, AmountCents: 1000}, {ID: 42, ProviderID: 9, AmountCents: 500}}
	s := ReplacementSplit{Remaining: 900, Cost: 1500, ProviderShare: 300, BuyerShare: 300}
	got := ReplacementChargeEntries(2, r, pieces, s, "pi_share", at)
	want := []LedgerEntry{{ReservationID: 5, Kind: EntryCharge, Debit: AccountPlatformCash, Credit: "provider:9", Amount: 300,
		StripeRef: "pi_share", IdempotencyKey: "repl_2_charge_42", At: at}}
	if len(got) != 1 || got[0] != want[0] {
		t.Fatalf("charge entries %+v, want %+v", got, want)
	}
	owed := map[string]Cents{}
	for _, e := range append(ReplacementEntries(2, r, 7, pieces, s, at), got...) {
		owed[e.Credit] += e.Amount
		owed[e.Debit] -= e.Amount
	}
	if owed["provider:8"] != 1000 || owed["provider:9"] != 500 || owed["provider:7"] != -1200 || owed[AccountPlatformCash] != -300 {
		t.Fatalf("balances %v", owed)
	}
	// Paid but not booked: the share is the buyer's until refunded.
	e := ReplacementUnbookedCharge(2, r, 300, "pi_share", at)
	if e.Credit != "buyer:3" || e.Debit != AccountPlatformCash || e.Amount != 300 || e.IdempotencyKey != "repl_2_charge" || e.Kind != EntryCharge {
		t.Fatalf("unbooked charge %+v", e)
	}
}

func TestReplacementOfferSentence(t *testing.T) {
	got := ReplacementOfferSentence(Offer{CreditCapBP: 2500})
	if !strings.Contains(got, "(at most 25% of the piece's amount)") || !strings.HasPrefix(got, "If a host fails") || strings.Count(got, ".") != 1 {
		t.Fatalf("sentence %q", got)
	}
}

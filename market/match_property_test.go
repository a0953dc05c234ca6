package market

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC)

// smallAccs and smallRegions keep random instances dense enough to match.
var (
	smallAccs    = []string{"nvidia-h100-80gb-sxm", "nvidia-a100-80gb-sxm", "nvidia-l4-24gb-pcie"}
	smallRegions = []string{"us-west-or", "eu-north-se", "ap-northeast-jp"}
)

// Software versions and network speeds offers and requests draw from.
var (
	// Neighbours a packed or truncated comparison would confuse: a fourth
	// part, and a part over 1023.
	smallDrivers = []string{"525.60", "535.104", "550.54", "560.35.03", "550.54.15.1", "550.54.15.2"}
	smallCUDAs   = []string{"11.8", "12.2", "12.4", "12.6", "6.2.41133", "6.2.41134"}
)

// randomOffer is a valid, listed offer with hour-aligned times, varied in
// everything a request can constrain: model, region, price, interconnect,
// network, software, figures (verified or not, a relative throughput) and
// carbon intensity.
func randomOffer(rng *rand.Rand, id int64) Offer {
	acc, _ := FindAccelerator(smallAccs[rng.IntN(len(smallAccs))])
	dpn := 1 + rng.IntN(4)
	nodes := 1 + rng.IntN(3)
	price := Cents(100 + rng.IntN(400))
	o := Offer{
		ID: id, ProviderID: 1 + rng.Int64N(4), Title: fmt.Sprintf("offer %d", id),
		AcceleratorID: acc.ID, MemoryGB: acc.MemoryGB, DevicesPerNode: dpn, Nodes: nodes,
		Interconnect: InterconnectPCIe, NetworkID: "ethernet-25", PlacementGroup: rng.IntN(2) == 0,
		CPUCores: 32, RAMGB: 256, StorageGB: 1000,
		DriverVersion: smallDrivers[rng.IntN(len(smallDrivers))], CUDAVersion: smallCUDAs[rng.IntN(len(smallCUDAs))],
		OSImage: "Ubuntu 22.04", ContainerRuntime: "Docker",
		RegionID: smallRegions[rng.IntN(len(smallRegions))], CarbonGPerKWh: 20 + rng.IntN(500),
		AvailableFrom:  t0.Add(time.Duration(rng.IntN(12)) * time.Hour),
		AvailableUntil: t0.Add(time.Duration(24+rng.IntN(48)) * time.Hour),
		MinRentalHours: 1 + rng.IntN(2), MaxRentalHours: 4 + rng.IntN(20), ProvisioningMins: rng.IntN(30),
		PriceCentsPerDeviceHour: price,
		StorageCentsPerGBMonth:  Cents(rng.IntN(20)), EgressCentsPerGB: Cents(rng.IntN(10)),
		BillingBasis: BillingWallClock, UptimeBP: 9900,
		Review: ReviewApproved, State: OfferActive,
	}
	if dpn > 1 && rng.IntN(2) == 0 {
		o.Interconnect = InterconnectNVLink
	}
	switch {
	case o.PlacementGroup && nodes > 1: // a multi-node placement group needs RDMA
		o.NetworkID = []string{"roce-200", "infiniband-400"}[rng.IntN(2)]
	case nodes > 1:
		o.NetworkID = []string{"ethernet-25", "ethernet-100", "roce-200"}[rng.IntN(3)]
	default:
		o.NetworkID = []string{"none", "ethernet-10", "ethernet-25", "ethernet-100"}[rng.IntN(4)]
	}
	bases := []FigureBasis{FigureVerified, FigureGuaranteed, FigureEstimated}
	if rng.IntN(2) == 0 {
		o.Figures = append(o.Figures, Figure{Kind: FigureMemBandwidth, Value: int64(1000 + rng.IntN(3000)), Basis: bases[rng.IntN(3)], Method: "stream"})
	}
	if rng.IntN(3) == 0 {
		o.Figures = append(o.Figures, Figure{Kind: FigureRelThroughput, Value: int64(300 + rng.IntN(3700)), Basis: bases[rng.IntN(3)], Method: "training run"})
	}
	if rng.IntN(3) == 0 {
		o.Interruptible = true
		o.InterruptibleCentsPerDH = price/2 + Cents(rng.IntN(int(price/2)))
		o.PreemptNoticeMins = 2
	}
	return o
}

// randomCommitment holds devices of o over [s, e) on nodes the way a
// booking can: a gang on one node, a gang on whole nodes (with a placement
// group), or devices spread over some nodes. Random commitments may
// overlap beyond a node's devices; a node is then full, not less.
func randomCommitment(rng *rand.Rand, o Offer, s, e time.Time) Commitment {
	c := Commitment{OfferID: o.ID, Start: s, End: e}
	perm := rng.Perm(o.Nodes)
	switch k := rng.IntN(3); {
	case k == 0 || (k == 1 && (!o.PlacementGroup || o.Nodes < 2)):
		c.Gang, c.Devices = true, 1+rng.IntN(o.DevicesPerNode)
		c.Nodes = []NodeShare{{Node: perm[0], Devices: c.Devices}}
	case k == 1:
		n := 2 + rng.IntN(o.Nodes-1)
		c.Gang, c.Devices = true, n*o.DevicesPerNode-rng.IntN(o.DevicesPerNode)
		for _, node := range perm[:n] {
			c.Nodes = append(c.Nodes, NodeShare{Node: node, Devices: o.DevicesPerNode})
		}
	default:
		for _, node := range perm[:1+rng.IntN(o.Nodes)] {
			d := 1 + rng.IntN(o.DevicesPerNode)
			c.Nodes = append(c.Nodes, NodeShare{Node: node, Devices: d})
			c.Devices += d
		}
	}
	return c
}

// nearlyAll holds every device of o over [s, e), or all but one.
func nearlyAll(rng *rand.Rand, o Offer, s, e time.Time) Commitment {
	c := Commitment{OfferID: o.ID, Start: s, End: e}
	for n := range o.Nodes {
		c.Nodes = append(c.Nodes, NodeShare{Node: n, Devices: o.DevicesPerNode})
		c.Devices += o.DevicesPerNode
	}
	if i := rng.IntN(o.Nodes); rng.IntN(2) == 0 && c.Nodes[i].Devices > 1 {
		c.Nodes[i].Devices--
		c.Devices--
	}
	return c
}

type instance struct {
	cands   []Candidate
	commits []Commitment
	req     Request
	now     time.Time
}

func randomInstance(rng *rand.Rand, kind WorkloadKind) instance {
	var in instance
	in.now = t0.Add(time.Duration(rng.IntN(6)) * time.Hour)
	n := 1 + rng.IntN(6)
	for i := range n {
		o := randomOffer(rng, int64(i+1))
		c := Candidate{Offer: o, ReliabilityBP: 9000 + rng.IntN(1001)}
		if rng.IntN(4) == 0 {
			c.ReliabilityBP = 0 // unknown: the prior
		}
		if o.Interruptible {
			c.InterruptionPPMPerHour = rng.IntN(50_000)
		}
		in.cands = append(in.cands, c)
		for range rng.IntN(4) {
			s := o.AvailableFrom.Add(time.Duration(rng.IntN(30)) * time.Hour)
			in.commits = append(in.commits, randomCommitment(rng, o, s, s.Add(time.Duration(1+rng.IntN(12))*time.Hour)))
		}
		if rng.IntN(8) == 0 { // nearly all of it, for most of its window
			s := o.AvailableFrom.Add(time.Duration(rng.IntN(4)) * time.Hour)
			in.commits = append(in.commits, nearlyAll(rng, o, s, s.Add(time.Duration(20+rng.IntN(40))*time.Hour)))
		}
		if o.Nodes > 1 && rng.IntN(3) == 0 {
			// Part of every node, at staggered times: the devices free as
			// one pool are more than any node, or all nodes at once, has.
			s := o.AvailableFrom.Add(time.Duration(rng.IntN(8)) * time.Hour)
			for n := range o.Nodes {
				d := 1 + rng.IntN(o.DevicesPerNode)
				e := s.Add(time.Duration(1+rng.IntN(4)) * time.Hour)
				in.commits = append(in.commits, Commitment{OfferID: o.ID, Devices: d, Start: s, End: e,
					Nodes: []NodeShare{{Node: n, Devices: d}}, Gang: true})
				s = e.Add(time.Duration(rng.IntN(2)-1) * time.Hour) // overlapping by an hour, touching or not
			}
		}
	}
	devices := 1 + rng.IntN(8)
	in.req = Request{
		Workload: Workload{
			Kind: kind, Devices: devices, Hours: 1 + rng.IntN(6),
			CheckpointMins: rng.IntN(120), RestartMins: rng.IntN(20),
			DatasetGB: rng.IntN(300),
		},
		Limit: MaxQuoteLimit,
	}
	if kind != WorkTraining {
		in.req.Workload.MinPieceDevices = 1 + rng.IntN(min(devices, 3))
	} else if rng.IntN(4) == 0 {
		// The work instead of the duration: hours per offer from its
		// relative throughput (verified or guaranteed figure, else catalogue).
		in.req.Workload.Hours = 0
		in.req.Workload.WorkDeviceHours = int64(1 + rng.IntN(devices*12))
		if rng.IntN(2) == 0 {
			in.req.Workload.WorkModelID = smallAccs[rng.IntN(len(smallAccs))]
		}
	}
	if rng.IntN(2) == 0 {
		in.req.Workload.DataRegionID = smallRegions[rng.IntN(len(smallRegions))]
	}
	c := &in.req.Constraints
	if rng.IntN(3) == 0 {
		c.EarliestStart = t0.Add(time.Duration(rng.IntN(24)) * time.Hour)
	}
	switch rng.IntN(6) {
	case 0, 1:
		c.Deadline = t0.Add(time.Duration(30+rng.IntN(40)) * time.Hour)
	case 2: // tight: little room after the earliest start
		lo := in.now
		if c.EarliestStart.After(lo) {
			lo = c.EarliestStart
		}
		c.Deadline = lo.Add(time.Duration(1+rng.IntN(8)) * time.Hour)
	}
	if rng.IntN(3) == 0 {
		c.MaxPricePerDeviceHour = Cents(150 + rng.IntN(300))
		if rng.IntN(2) == 0 { // on an offer's price, or a cent under it
			c.MaxPricePerDeviceHour = in.cands[rng.IntN(len(in.cands))].Offer.PriceCentsPerDeviceHour - Cents(rng.IntN(2))
		}
	}
	if rng.IntN(4) == 0 {
		c.BudgetCents = Cents(1000 + rng.IntN(20000))
	}
	switch rng.IntN(8) {
	case 0, 1:
		c.RegionIDs = []string{smallRegions[rng.IntN(len(smallRegions))]}
	case 2:
		c.Countries = []string{[]string{"US", "SE", "JP"}[rng.IntN(3)]}
	case 3: // a region narrowing the allowed countries (its own and another)
		k := rng.IntN(len(smallRegions))
		c.RegionIDs = []string{smallRegions[k]}
		c.Countries = []string{[]string{"US", "SE", "JP"}[k], []string{"US", "SE", "JP"}[(k+1+rng.IntN(2))%3]}
	}
	switch rng.IntN(8) {
	case 0, 1:
		c.Families = []string{"H100", "A100"}
	case 2:
		c.AcceleratorIDs = []string{smallAccs[rng.IntN(len(smallAccs))]}
	case 3: // a model narrowing the allowed families
		c.Families = []string{"H100", "A100"}
		c.AcceleratorIDs = []string{smallAccs[rng.IntN(2)]}
	}
	if rng.IntN(8) == 0 {
		c.MinMemoryGB = []int{40, 80}[rng.IntN(2)]
	}
	if rng.IntN(5) == 0 {
		c.MinInterconnect = []Interconnect{InterconnectPCIe, InterconnectNVLink}[rng.IntN(2)]
	}
	if rng.IntN(5) == 0 {
		c.MinNetworkGbps = []int{10, 25, 100, 200, 400}[rng.IntN(5)]
	}
	if rng.IntN(6) == 0 {
		c.MinDriverVersion = smallDrivers[rng.IntN(len(smallDrivers))]
	}
	if rng.IntN(6) == 0 {
		c.MinCUDAVersion = smallCUDAs[rng.IntN(len(smallCUDAs))]
	}
	c.RequireVerified = rng.IntN(6) == 0
	if rng.IntN(5) == 0 {
		c.MinReliabilityBP = 9000 + rng.IntN(1001)
		if cand := in.cands[rng.IntN(len(in.cands))]; rng.IntN(2) == 0 && cand.ReliabilityBP > 0 {
			c.MinReliabilityBP = min(10000, cand.ReliabilityBP+rng.IntN(2)) // on a provider's record, or just over
		}
	}
	if rng.IntN(5) == 0 {
		c.MaxCarbonGPerKWh = 50 + rng.IntN(450)
		if rng.IntN(2) == 0 { // on an offer's intensity, or just under
			c.MaxCarbonGPerKWh = max(1, in.cands[rng.IntN(len(in.cands))].Offer.CarbonGPerKWh-rng.IntN(2))
		}
	}
	c.AllowInterruption = rng.IntN(2) == 0
	return in
}

// checkQuotes asserts what holds for every result: counts add up, no
// instant of any node is overcommitted, gangs are one piece, pieces lie in
// the window, and every piece is placed on nodes by the documented rule.
func checkQuotes(t *testing.T, in instance, res Result) {
	t.Helper()
	ex := res.Explanation
	sum := ex.Fit
	for _, e := range ex.Eliminated {
		sum += e.Count
	}
	if sum != ex.Considered || ex.Considered != len(in.cands) {
		t.Fatalf("explanation counts %d (fit %d) != considered %d != offers %d: %+v", sum, ex.Fit, ex.Considered, len(in.cands), ex)
	}
	offers := map[int64]Offer{}
	for _, c := range in.cands {
		offers[c.Offer.ID] = c.Offer
	}
	gang := in.req.Workload.Kind == WorkTraining
	for _, q := range res.Quotes {
		if gang && (len(q.Pieces) != 1 || q.Pieces[0].Devices != in.req.Workload.Devices) {
			t.Fatalf("gang split or resized: %+v", q.Pieces)
		}
		total := 0
		var sum CostBreakdown
		for _, p := range q.Pieces {
			total += p.Devices
			sum.add(p.Cost)
			o := offers[p.OfferID]
			if err := FitsCapacity(o, in.commits, []Commitment{p.Commitment()}); err != nil {
				t.Fatalf("piece %+v does not fit: %v", p, err)
			}
			if p.Gang != gang || !refFits(o, in.commits, p.Start, p.Hours, p.Devices, gang) {
				t.Fatalf("piece %+v does not fit offer %d's nodes (gang %t)", p, o.ID, gang)
			}
			checkPlacement(t, o, in.commits, p.Commitment())
			if p.Start.Before(in.now) || p.Start.Before(in.req.Constraints.EarliestStart) ||
				(!in.req.Constraints.Deadline.IsZero() && p.End.After(in.req.Constraints.Deadline)) {
				t.Fatalf("piece %+v outside the request's window", p)
			}
			if p.Devices < in.req.Workload.MinPieceDevices {
				t.Fatalf("piece %+v under the minimum piece", p)
			}
		}
		if total != in.req.Workload.Devices {
			t.Fatalf("quote has %d devices, want %d", total, in.req.Workload.Devices)
		}
		if sum != q.Cost {
			t.Fatalf("quote cost %+v is not the sum of its pieces %+v", q.Cost, sum)
		}
		if b := in.req.Constraints.BudgetCents; b > 0 && q.Cost.Total > b {
			t.Fatalf("quote over budget: %s > %s", q.Cost.Total, b)
		}
	}
}

// checkPlacement places c on o beside commits and compares the nodes with
// refPlacement, and each node's devices hour by hour with what it has.
func checkPlacement(t *testing.T, o Offer, commits []Commitment, c Commitment) {
	t.Helper()
	placed, err := PlaceCommitments(o, commits, []Commitment{c})
	if err != nil {
		t.Fatalf("piece %+v not placed: %v", c, err)
	}
	got, want := placed[0].Nodes, refPlacement(o, commits, c)
	sorted := append([]NodeShare(nil), got...)
	slices.SortFunc(sorted, func(a, b NodeShare) int { return a.Node - b.Node })
	if !slices.Equal(sorted, want) {
		t.Fatalf("piece %+v placed on %v, reference %v", c, got, want)
	}
	for _, sh := range got {
		for h := 0; c.Start.Add(time.Duration(h) * time.Hour).Before(c.End); h++ {
			at := c.Start.Add(time.Duration(h) * time.Hour)
			if used := refNodeUsed(o, commits, sh.Node, at); used+sh.Devices > o.DevicesPerNode {
				t.Fatalf("piece %+v placed on %v overbooks node %d at %s: %d + %d of %d", c, got, sh.Node, at, used, sh.Devices, o.DevicesPerNode)
			}
		}
	}
}

// refPlacement places c by the rule PlaceCommitments documents, from each
// node's free devices counted hour by hour: a gang that fits in a node on
// the node with the fewest free devices that holds it (lowest on ties); a
// larger gang on the lowest wholly free nodes, all their devices; a split
// piece on one node by the same best fit when one holds it, else over the
// nodes with the fewest free devices first (lowest first on ties), the
// last taking the rest. Shares by node.
func refPlacement(o Offer, commits []Commitment, c Commitment) []NodeShare {
	hours := int(c.End.Sub(c.Start) / time.Hour)
	free := make([]int, o.Nodes)
	for n := range free {
		free[n] = refNodeFree(o, commits, n, c.Start, hours)
	}
	if c.Gang && c.Devices > o.DevicesPerNode {
		var out []NodeShare
		for n := 0; n < o.Nodes && len(out)*o.DevicesPerNode < c.Devices; n++ {
			if free[n] == o.DevicesPerNode {
				out = append(out, NodeShare{Node: n, Devices: o.DevicesPerNode})
			}
		}
		return out
	}
	best := -1
	for n, f := range free {
		if f >= c.Devices && (best < 0 || f < free[best]) {
			best = n
		}
	}
	if best >= 0 {
		return []NodeShare{{Node: best, Devices: c.Devices}}
	}
	order := make([]int, o.Nodes)
	for n := range order {
		order[n] = n
	}
	slices.SortStableFunc(order, func(a, b int) int { return free[a] - free[b] })
	var out []NodeShare
	need := c.Devices
	for _, n := range order {
		if need > 0 && free[n] > 0 {
			out = append(out, NodeShare{Node: n, Devices: min(free[n], need)})
			need -= min(free[n], need)
		}
	}
	slices.SortFunc(out, func(a, b NodeShare) int { return a.Node - b.Node })
	return out
}

// coverage counts, over a property test's instances, those where the
// reference eliminated offers by each constraint and the relaxations it
// checked, so a generator that stopped exercising one fails the test.
type coverage struct {
	eliminated map[Constraint]int
	relaxed    map[Constraint]int
	// nodeLimited counts instances where nodes, not the offer's devices
	// as one pool, decided an offer's answer.
	nodeLimited *int
}

func newCoverage() coverage {
	return coverage{eliminated: map[Constraint]int{}, relaxed: map[Constraint]int{}, nodeLimited: new(int)}
}

func (cv coverage) add(ref refResult) {
	for c, n := range ref.counts {
		if n > 0 {
			cv.eliminated[c]++
		}
	}
	if ref.nodeLimited > 0 {
		*cv.nodeLimited++
	}
}

// require fails unless every constraint eliminated offers in at least
// minElim instances and every relaxation was checked at least minRelax times.
func (cv coverage) require(t *testing.T, minElim, minRelax int) {
	t.Helper()
	for _, c := range []Constraint{ConstraintModel, ConstraintMemory, ConstraintRegion, ConstraintPrice,
		ConstraintInterconnect, ConstraintNetwork, ConstraintSoftware, ConstraintVerified, ConstraintReliability,
		ConstraintCarbon, ConstraintDevices, ConstraintWindow, ConstraintBooked, ConstraintBudget} {
		if cv.eliminated[c] < minElim {
			t.Errorf("%s eliminated offers in only %d instances (want ≥ %d): the generator does not exercise it", c, cv.eliminated[c], minElim)
		}
	}
	for _, x := range relaxable {
		if cv.relaxed[x.c] < minRelax {
			t.Errorf("only %d %s relaxations checked (want ≥ %d)", cv.relaxed[x.c], x.c, minRelax)
		}
	}
	if *cv.nodeLimited < minElim {
		t.Errorf("nodes decided an offer's answer in only %d instances (want ≥ %d)", *cv.nodeLimited, minElim)
	}
	t.Logf("eliminated: %v; relaxations checked: %v; node-limited instances: %d", cv.eliminated, cv.relaxed, *cv.nodeLimited)
}

func TestMatchGangAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cv := newCoverage()
	matched := 0
	for i := range 6000 {
		in := randomInstance(rng, WorkTraining)
		res, err := Match(in.cands, in.commits, in.req, in.now)
		if err != nil {
			t.Fatalf("instance %d: %v", i, err)
		}
		checkQuotes(t, in, res)
		ref := refSolve(in)
		cv.add(ref)
		checkAgainstReference(t, i, in, res, ref)
		checkRelaxations(t, i, in, res, cv.relaxed)
		if ref.best < 0 {
			continue
		}
		matched++
		if got := int64(res.Quotes[0].Cost.Total); got != ref.best {
			t.Fatalf("instance %d: best quote costs %d, reference optimum %d", i, got, ref.best)
		}
	}
	if matched < 600 {
		t.Fatalf("only %d of 6000 instances matched: the generator is too strict to test much", matched)
	}
	t.Logf("%d of 6000 instances matched", matched)
	cv.require(t, 20, 5)
}

func TestMatchSplitAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	cv := newCoverage()
	matched := 0
	for i := range 4000 {
		in := randomInstance(rng, WorkBatch)
		res, err := Match(in.cands, in.commits, in.req, in.now)
		if err != nil {
			t.Fatalf("instance %d: %v", i, err)
		}
		checkQuotes(t, in, res)
		ref := refSolve(in)
		cv.add(ref)
		checkAgainstReference(t, i, in, res, ref)
		checkRelaxations(t, i, in, res, cv.relaxed)
		if ref.best < 0 {
			continue
		}
		matched++
		q := res.Quotes[0]
		if !q.Exact {
			t.Fatalf("instance %d: small instance solved inexactly", i)
		}
		if got := int64(q.Cost.Total); got != ref.best {
			t.Fatalf("instance %d: best split costs %d, reference optimum %d (%+v)", i, got, ref.best, q.Pieces)
		}
	}
	if matched < 400 {
		t.Fatalf("only %d of 4000 instances matched", matched)
	}
	t.Logf("%d of 4000 instances matched", matched)
	cv.require(t, 20, 5)
}

// TestMatchSplitBoundedAgainstReference forces the bounded search and
// checks its documented guarantee: LowerBound ≤ optimum ≤ cost.
func TestMatchSplitBoundedAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	matched, gaps := 0, 0
	for i := range 4000 {
		in := randomInstance(rng, WorkBatch)
		idx := NewIndex()
		idx.eng.evalBudget, idx.eng.boundedK = 0, 2
		for _, c := range in.commits {
			idx.AddCommitment(c)
		}
		for _, c := range in.cands {
			if err := idx.Upsert(c); err != nil {
				t.Fatal(err)
			}
		}
		res, err := idx.Match(in.req, in.now)
		if err != nil {
			t.Fatal(err)
		}
		checkQuotes(t, in, res)
		best := refSolve(in).best
		for _, q := range res.Quotes {
			if len(q.Pieces) < 2 {
				continue
			}
			matched++
			if q.Exact {
				t.Fatalf("instance %d: bounded split marked exact", i)
			}
			if int64(q.LowerBound) > best || int64(q.Cost.Total) < best {
				t.Fatalf("instance %d: bound %d ≤ optimum %d ≤ cost %d fails", i, q.LowerBound, best, q.Cost.Total)
			}
			if int64(q.Cost.Total) > best {
				gaps++
			}
		}
	}
	if matched < 100 {
		t.Fatalf("only %d bounded splits checked", matched)
	}
	t.Logf("bounded splits: %d checked, %d above the optimum", matched, gaps)
}

// TestIndexEqualsScan checks the pruned index gives exactly the scan's
// result, explanations and relaxations included.
func TestIndexEqualsScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 500 {
		kind := []WorkloadKind{WorkTraining, WorkBatch, WorkInference}[i%3]
		in := randomInstance(rng, kind)
		idx := NewIndex()
		for _, c := range in.cands {
			if err := idx.Upsert(c); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range in.commits {
			idx.AddCommitment(c)
		}
		a, err := idx.Match(in.req, in.now)
		if err != nil {
			t.Fatal(err)
		}
		b, err := idx.scan(in.req, in.now)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprintf("%+v", a) != fmt.Sprintf("%+v", b) {
			t.Fatalf("instance %d: index and scan differ:\n%+v\n%+v", i, a, b)
		}
	}
}

// TestIndexUpdatesEqualFresh applies random offer and commitment changes to
// one index, compacting its span arena at every chance, and checks every
// query against an index built afresh from the same data.
func TestIndexUpdatesEqualFresh(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for i := range 300 {
		kind := []WorkloadKind{WorkTraining, WorkBatch, WorkInference}[i%3]
		in := randomInstance(rng, kind)
		idx := NewIndex()
		idx.compactMin = 1
		if i%2 == 0 {
			if err := idx.Load(in.cands, in.commits); err != nil {
				t.Fatal(err)
			}
		} else {
			for _, c := range in.commits {
				idx.AddCommitment(c)
			}
			for _, c := range in.cands {
				if err := idx.Upsert(c); err != nil {
					t.Fatal(err)
				}
			}
		}
		listed := map[int64]bool{}
		for _, c := range in.cands {
			listed[c.Offer.ID] = true
		}
		for step := range 12 {
			switch op := rng.IntN(5); {
			case op == 0 && len(in.commits) > 0: // release a commitment
				k := rng.IntN(len(in.commits))
				if !idx.RemoveCommitment(in.commits[k]) {
					t.Fatalf("instance %d step %d: commitment %+v not found", i, step, in.commits[k])
				}
				in.commits = append(in.commits[:k], in.commits[k+1:]...)
			case op == 1: // withdraw or list again
				c := in.cands[rng.IntN(len(in.cands))]
				if listed[c.Offer.ID] {
					idx.Remove(c.Offer.ID)
				} else if err := idx.Upsert(c); err != nil {
					t.Fatal(err)
				}
				listed[c.Offer.ID] = !listed[c.Offer.ID]
			case op == 2: // change an offer's price and region
				k := rng.IntN(len(in.cands))
				o := randomOffer(rng, in.cands[k].Offer.ID)
				o.AvailableFrom, o.AvailableUntil = in.cands[k].Offer.AvailableFrom, in.cands[k].Offer.AvailableUntil
				in.cands[k].Offer = o
				if listed[o.ID] {
					if err := idx.Upsert(in.cands[k]); err != nil {
						t.Fatal(err)
					}
				}
			default: // book
				o := in.cands[rng.IntN(len(in.cands))].Offer
				s := o.AvailableFrom.Add(time.Duration(rng.IntN(30)) * time.Hour)
				c := randomCommitment(rng, o, s, s.Add(time.Duration(1+rng.IntN(12))*time.Hour))
				idx.AddCommitment(c)
				in.commits = append(in.commits, c)
			}
			var cands []Candidate
			for _, c := range in.cands {
				if listed[c.Offer.ID] {
					cands = append(cands, c)
				}
			}
			want, err := Match(cands, in.commits, in.req, in.now)
			if err != nil {
				t.Fatal(err)
			}
			got, err := idx.Match(in.req, in.now)
			if err != nil {
				t.Fatal(err)
			}
			if fmtResult(got) != fmtResult(want) {
				t.Fatalf("instance %d step %d: updated index and a fresh one differ:\n%+v\n%+v", i, step, got, want)
			}
		}
	}
}

func fmtResult(r Result) string { return fmt.Sprintf("%+v", r) }

package market

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC)

// smallAccs and smallRegions keep random instances dense enough to match.
var (
	smallAccs    = []string{"nvidia-h100-80gb-sxm", "nvidia-a100-80gb-sxm", "nvidia-l4-24gb-pcie"}
	smallRegions = []string{"us-west-or", "eu-north-se", "ap-northeast-jp"}
)

// randomOffer is a valid, listed offer with hour-aligned times.
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
		DriverVersion: "550.54", CUDAVersion: "12.4", OSImage: "Ubuntu 22.04", ContainerRuntime: "Docker",
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
	if o.PlacementGroup && nodes > 1 {
		o.NetworkID = "infiniband-400"
	}
	if rng.IntN(3) == 0 {
		o.Interruptible = true
		o.InterruptibleCentsPerDH = price/2 + Cents(rng.IntN(int(price/2)))
		o.PreemptNoticeMins = 2
	}
	return o
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
			in.commits = append(in.commits, Commitment{
				OfferID: o.ID, Devices: 1 + rng.IntN(o.Devices()),
				Start: s, End: s.Add(time.Duration(1+rng.IntN(12)) * time.Hour),
			})
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
	}
	if rng.IntN(2) == 0 {
		in.req.Workload.DataRegionID = smallRegions[rng.IntN(len(smallRegions))]
	}
	c := &in.req.Constraints
	if rng.IntN(3) == 0 {
		c.EarliestStart = t0.Add(time.Duration(rng.IntN(24)) * time.Hour)
	}
	if rng.IntN(3) == 0 {
		c.Deadline = t0.Add(time.Duration(30+rng.IntN(40)) * time.Hour)
	}
	if rng.IntN(3) == 0 {
		c.MaxPricePerDeviceHour = Cents(150 + rng.IntN(300))
	}
	if rng.IntN(4) == 0 {
		c.BudgetCents = Cents(1000 + rng.IntN(20000))
	}
	if rng.IntN(4) == 0 {
		c.RegionIDs = []string{smallRegions[rng.IntN(len(smallRegions))]}
	}
	if rng.IntN(4) == 0 {
		c.Families = []string{"H100", "A100"}
	}
	c.AllowInterruption = rng.IntN(2) == 0
	return in
}

// refOffer is the brute-force view of one offer: whether it passes the
// static constraints, and its free devices per hour over the horizon.
type refOffer struct {
	c      Candidate
	ok     bool
	intr   bool
	hours  int
	starts []time.Time // hour-aligned allowed starts
}

// reference filters offers independently of the engine's code, hour by
// hour (every time in the instances is hour-aligned).
func reference(in instance) []refOffer {
	var out []refOffer
	c := in.req.Constraints
	lo := in.now
	if c.EarliestStart.After(lo) {
		lo = c.EarliestStart
	}
	for _, cand := range in.cands {
		o := cand.Offer
		r := refOffer{c: cand, hours: in.req.Workload.Hours}
		r.intr = c.AllowInterruption && o.Interruptible
		price := o.PriceCentsPerDeviceHour
		if r.intr {
			price = o.InterruptibleCentsPerDH
		}
		acc := o.Accelerator()
		region := o.Region()
		ok := true
		if len(c.Families) > 0 && !inList(c.Families, acc.Family) {
			ok = false
		}
		if len(c.RegionIDs) > 0 && !inList(c.RegionIDs, region.ID) {
			ok = false
		}
		if c.MaxPricePerDeviceHour > 0 && price > c.MaxPricePerDeviceHour {
			ok = false
		}
		need := in.req.Workload.Devices
		if in.req.Workload.Kind != WorkTraining {
			need = in.req.Workload.MinPieceDevices
		}
		if o.Devices() < need {
			ok = false
		}
		if in.req.Workload.Kind == WorkTraining && need > o.DevicesPerNode && !o.PlacementGroup {
			ok = false
		}
		if r.hours < o.MinRentalHours || r.hours > o.MaxRentalHours {
			ok = false
		}
		r.ok = ok
		start := lo
		if o.AvailableFrom.After(start) {
			start = o.AvailableFrom
		}
		end := o.AvailableUntil
		if !c.Deadline.IsZero() && c.Deadline.Before(end) {
			end = c.Deadline
		}
		for s := start; !s.Add(time.Duration(r.hours) * time.Hour).After(end); s = s.Add(time.Hour) {
			r.starts = append(r.starts, s)
		}
		out = append(out, r)
	}
	return out
}

// freeAt is the devices of o free throughout [s, s+hours), checked hour by hour.
func freeAt(o Offer, commits []Commitment, s time.Time, hours int) int {
	free := o.Devices()
	for h := range hours {
		t := s.Add(time.Duration(h) * time.Hour)
		used := 0
		for _, c := range commits {
			if c.OfferID == o.ID && !t.Before(c.Start) && t.Before(c.End) {
				used += c.Devices
			}
		}
		free = min(free, o.Devices()-used)
	}
	return free
}

func refCost(t *testing.T, in instance, r refOffer, devices int) int64 {
	t.Helper()
	cb, err := EstimateCost(r.c, in.req, devices, r.hours)
	if err != nil {
		t.Fatal(err)
	}
	if cb.Total != cb.Instance+cb.Storage+cb.Egress+cb.Orchestration+cb.FailedWork+cb.Restart {
		t.Fatalf("items do not add up: %+v", cb)
	}
	return int64(cb.Total)
}

// refGang returns the optimal gang cost and the feasible offer count.
func refGang(t *testing.T, in instance) (best int64, feasible int, starts map[int64]time.Time) {
	best = -1
	starts = map[int64]time.Time{}
	D := in.req.Workload.Devices
	for _, r := range reference(in) {
		if !r.ok {
			continue
		}
		for _, s := range r.starts {
			if freeAt(r.c.Offer, in.commits, s, r.hours) >= D {
				cost := refCost(t, in, r, D)
				if b := in.req.Constraints.BudgetCents; b > 0 && cost > int64(b) {
					break
				}
				feasible++
				starts[r.c.Offer.ID] = s
				if best < 0 || cost < best {
					best = cost
				}
				break
			}
		}
	}
	return best, feasible, starts
}

// refSplit enumerates every assignment of devices to offers.
func refSplit(t *testing.T, in instance) int64 {
	D, m := in.req.Workload.Devices, in.req.Workload.MinPieceDevices
	var rs []refOffer
	var avail []int
	for _, r := range reference(in) {
		if !r.ok {
			continue
		}
		a := 0
		for _, s := range r.starts {
			a = max(a, freeAt(r.c.Offer, in.commits, s, r.hours))
		}
		if a >= m {
			rs = append(rs, r)
			avail = append(avail, min(a, D))
		}
	}
	best := int64(-1)
	var rec func(i, left int, cost int64)
	rec = func(i, left int, cost int64) {
		if left == 0 {
			if b := in.req.Constraints.BudgetCents; (b == 0 || cost <= int64(b)) && (best < 0 || cost < best) {
				best = cost
			}
			return
		}
		if i == len(rs) {
			return
		}
		rec(i+1, left, cost)
		for d := m; d <= avail[i] && d <= left; d++ {
			rec(i+1, left-d, cost+refCost(t, in, rs[i], d))
		}
	}
	rec(0, D, 0)
	return best
}

// checkQuotes asserts what holds for every result: counts add up, no
// instant is overcommitted, gangs are one piece, pieces lie in the window.
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
	for _, q := range res.Quotes {
		if in.req.Workload.Kind == WorkTraining && (len(q.Pieces) != 1 || q.Pieces[0].Devices != in.req.Workload.Devices) {
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
			if freeAt(o, in.commits, p.Start, p.Hours) < p.Devices {
				t.Fatalf("piece %+v overcommits offer %d", p, o.ID)
			}
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

func TestMatchGangAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	matched := 0
	for i := range 3000 {
		in := randomInstance(rng, WorkTraining)
		res, err := Match(in.cands, in.commits, in.req, in.now)
		if err != nil {
			t.Fatalf("instance %d: %v", i, err)
		}
		checkQuotes(t, in, res)
		best, feasible, starts := refGang(t, in)
		if res.Total != feasible {
			t.Fatalf("instance %d: engine found %d feasible offers, reference %d", i, res.Total, feasible)
		}
		if best < 0 {
			if len(res.Quotes) != 0 {
				t.Fatalf("instance %d: engine quoted where the reference found nothing", i)
			}
			continue
		}
		matched++
		if got := int64(res.Quotes[0].Cost.Total); got != best {
			t.Fatalf("instance %d: best quote costs %d, reference optimum %d", i, got, best)
		}
		for _, q := range res.Quotes {
			if want := starts[q.Pieces[0].OfferID]; !q.Start.Equal(want) {
				t.Fatalf("instance %d: offer %d starts %s, reference earliest %s", i, q.Pieces[0].OfferID, q.Start, want)
			}
		}
	}
	if matched < 300 {
		t.Fatalf("only %d of 3000 instances matched: the generator is too strict to test much", matched)
	}
}

func TestMatchSplitAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	matched := 0
	for i := range 3000 {
		in := randomInstance(rng, WorkBatch)
		res, err := Match(in.cands, in.commits, in.req, in.now)
		if err != nil {
			t.Fatalf("instance %d: %v", i, err)
		}
		checkQuotes(t, in, res)
		best := refSplit(t, in)
		if best < 0 {
			if len(res.Quotes) != 0 {
				t.Fatalf("instance %d: engine quoted where the reference found nothing", i)
			}
			continue
		}
		if len(res.Quotes) == 0 {
			t.Fatalf("instance %d: no quote, reference optimum %d", i, best)
		}
		matched++
		q := res.Quotes[0]
		if !q.Exact {
			t.Fatalf("instance %d: small instance solved inexactly", i)
		}
		if got := int64(q.Cost.Total); got != best {
			t.Fatalf("instance %d: best split costs %d, reference optimum %d (%+v)", i, got, best, q.Pieces)
		}
	}
	if matched < 300 {
		t.Fatalf("only %d of 3000 instances matched", matched)
	}
}

// TestMatchSplitBoundedAgainstReference forces the bounded search and
// checks its documented guarantee: LowerBound ≤ optimum ≤ cost.
func TestMatchSplitBoundedAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	matched, gaps := 0, 0
	for i := range 2000 {
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
		best := refSplit(t, in)
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
				c := Commitment{OfferID: o.ID, Devices: 1 + rng.IntN(o.Devices()), Start: s, End: s.Add(time.Duration(1+rng.IntN(12)) * time.Hour)}
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

package market

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestIndexConcurrent runs readers beside one writer; -race checks it.
func TestIndexConcurrent(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	idx := NewIndex()
	for i := range 200 {
		if err := idx.Upsert(Candidate{Offer: randomOffer(rng, int64(i+1))}); err != nil {
			t.Fatal(err)
		}
	}
	req := Request{Workload: Workload{Kind: WorkBatch, Devices: 6, MinPieceDevices: 2, Hours: 3}}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, err := idx.Match(req, t0)
				if err != nil {
					t.Error(err)
					return
				}
				ex := res.Explanation
				n := ex.Fit + ex.Cut.Unexamined + ex.Skipped
				for _, e := range ex.Eliminated {
					n += e.Count
				}
				if n != ex.Considered {
					t.Errorf("counts %d (fit %d, unexamined %d, skipped %d) != considered %d", n, ex.Fit, ex.Cut.Unexamined, ex.Skipped, ex.Considered)
					return
				}
			}
		}()
	}
	wrng := rand.New(rand.NewPCG(13, 14))
	for i := range 300 {
		id := int64(1 + wrng.IntN(200))
		switch i % 3 {
		case 0:
			if err := idx.Upsert(Candidate{Offer: randomOffer(wrng, id)}); err != nil {
				t.Fatal(err)
			}
		case 1:
			c := Commitment{OfferID: id, Devices: 1, Start: t0, End: t0.Add(time.Hour)}
			idx.AddCommitment(c)
			if !idx.RemoveCommitment(c) {
				t.Fatalf("commitment on offer %d not found", id)
			}
		case 2:
			idx.Remove(id)
		}
	}
	close(stop)
	wg.Wait()
}

// TestIndexIncrementalEqualsLoad: updates one by one end where a bulk load
// of the final state starts.
func TestIndexIncrementalEqualsLoad(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	inc := NewIndex()
	final := map[int64]Candidate{}
	var commits []Commitment
	for i := range 400 {
		id := int64(1 + rng.IntN(60))
		switch i % 4 {
		case 0, 1:
			c := Candidate{Offer: randomOffer(rng, id)}
			if rng.IntN(5) == 0 {
				c.Offer.State = OfferPaused
				delete(final, id)
			} else {
				final[id] = c
			}
			if err := inc.Upsert(c); err != nil {
				t.Fatal(err)
			}
		case 2:
			c := Commitment{OfferID: id, Devices: 1 + rng.IntN(2), Start: t0.Add(time.Duration(rng.IntN(20)) * time.Hour)}
			c.End = c.Start.Add(3 * time.Hour)
			inc.AddCommitment(c)
			commits = append(commits, c)
		case 3:
			if len(commits) > 0 {
				j := rng.IntN(len(commits))
				if !inc.RemoveCommitment(commits[j]) {
					t.Fatalf("commitment %+v not found", commits[j])
				}
				commits = append(commits[:j], commits[j+1:]...)
			}
		}
	}
	var cands []Candidate
	for _, c := range final {
		cands = append(cands, c)
	}
	bulk := NewIndex()
	if err := bulk.Load(cands, commits); err != nil {
		t.Fatal(err)
	}
	if inc.Len() != bulk.Len() {
		t.Fatalf("incremental %d offers, bulk %d", inc.Len(), bulk.Len())
	}
	for _, kind := range []WorkloadKind{WorkTraining, WorkBatch} {
		req := Request{Workload: Workload{Kind: kind, Devices: 4, Hours: 4}}
		a, err := inc.Match(req, t0)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := bulk.Match(req, t0)
		// The early stop may stop at another offer (an incremental index's
		// bounds only widen), so the counts may differ; the quotes may not.
		if len(a.Quotes) == 0 || fmt.Sprint(a.Quotes) != fmt.Sprint(b.Quotes) {
			t.Fatalf("%s: incremental and bulk differ or are empty:\n%s\n%s", kind, fmtResult(a), fmtResult(b))
		}
		a, _ = inc.exhaustive(req, t0)
		b, _ = bulk.exhaustive(req, t0)
		if fmtResult(a) != fmtResult(b) {
			t.Fatalf("%s: incremental and bulk differ without the early stop:\n%s\n%s", kind, fmtResult(a), fmtResult(b))
		}
	}
}

// withCatalogue replaces the accelerator and region catalogue for the rest
// of the test, so the index can be tried with more of each than ship.
func withCatalogue(t *testing.T, accs []Accelerator, regs []Region) {
	t.Helper()
	oldAccs, oldAccByID, oldRegs, oldRegByID := accelerators, acceleratorByID, regions, regionByID
	t.Cleanup(func() {
		accelerators, acceleratorByID, regions, regionByID = oldAccs, oldAccByID, oldRegs, oldRegByID
	})
	accelerators, regions = accs, regs
	acceleratorByID, regionByID = map[string]Accelerator{}, map[string]Region{}
	for _, a := range accs {
		acceleratorByID[a.ID] = a
	}
	for _, r := range regs {
		regionByID[r.ID] = r
	}
}

// grownCatalogue is the shipped catalogue with synthetic accelerators
// ("acc-N", an H100 under another id) and regions ("region-N", in the US)
// added until there are nAcc and nReg of each.
func grownCatalogue(nAcc, nReg int) ([]Accelerator, []Region) {
	accs := append([]Accelerator(nil), accelerators...)
	h100, _ := FindAccelerator("nvidia-h100-80gb-sxm")
	for i := len(accs); i < nAcc; i++ {
		a := h100
		a.ID, a.Name = fmt.Sprintf("acc-%d", i), fmt.Sprintf("Accelerator %d", i)
		accs = append(accs, a)
	}
	regs := append([]Region(nil), regions...)
	va, _ := FindRegion("us-east-va")
	for i := len(regs); i < nReg; i++ {
		r := va
		r.ID, r.Name = fmt.Sprintf("region-%d", i), fmt.Sprintf("Region %d", i)
		regs = append(regs, r)
	}
	return accs, regs
}

// TestIndexBeyond32AcceleratorsAndRegions: the index once kept 32
// accelerators × 32 regions in fixed buckets — a 33rd accelerator
// panicked and the 33rd region shared a bucket with the next accelerator's
// first region, so a query for one returned offers of the other. Offers
// at the corners of catalogues of 33 and of 256 (the most a slot's one
// byte addresses) are found by exactly the queries that name them, in an
// index built offer by offer and in one loaded at once.
func TestIndexBeyond32AcceleratorsAndRegions(t *testing.T) {
	for _, size := range []int{33, 64, 65, 256} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			accs, regs := grownCatalogue(size, size)
			withCatalogue(t, accs, regs)
			last, lastReg := accs[size-1].ID, regs[size-1].ID
			first, firstReg, second := accs[0].ID, regs[0].ID, accs[1].ID
			cands := []Candidate{
				{Offer: plainOffer(1, last, firstReg, 1, 100)},
				{Offer: plainOffer(2, first, lastReg, 1, 100)},
				// Where the 33rd region of the first accelerator used to land.
				{Offer: plainOffer(3, second, firstReg, 1, 100)},
				{Offer: plainOffer(4, last, lastReg, 1, 100)},
				{Offer: plainOffer(5, first, firstReg, 1, 100)},
			}
			loaded := NewIndex()
			if err := loaded.Load(cands, nil); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				name          string
				accs, regions []string
				want          []int64
			}{
				{"last accelerator", []string{last}, nil, []int64{1, 4}},
				{"last region", nil, []string{lastReg}, []int64{2, 4}},
				{"first region", nil, []string{firstReg}, []int64{1, 3, 5}},
				{"second accelerator", []string{second}, nil, []int64{3}},
				{"first accelerator in the last region", []string{first}, []string{lastReg}, []int64{2}},
				{"last accelerator in the last region", []string{last}, []string{lastReg}, []int64{4}},
				{"everything", nil, nil, []int64{1, 2, 3, 4, 5}},
			} {
				req := oneDeviceJob(WorkBatch)
				req.Constraints.AcceleratorIDs, req.Constraints.RegionIDs = tc.accs, tc.regions
				req.Limit = MaxQuoteLimit
				byOne, err := Match(cands, nil, req, t0)
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				atOnce, err := loaded.Match(req, t0)
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				for how, res := range map[string]Result{"upserted": byOne, "loaded": atOnce} {
					if got := quotedOffers(res); !sameIDs(got, tc.want) {
						t.Errorf("%s (%s): quoted offers %v, want %v", tc.name, how, got, tc.want)
					}
					for _, q := range res.Quotes {
						for _, p := range q.Pieces {
							o := cands[p.OfferID-1].Offer
							if p.AcceleratorID != o.AcceleratorID || p.RegionID != o.RegionID {
								t.Errorf("%s (%s): offer %d quoted as %s in %s, listed as %s in %s", tc.name, how,
									p.OfferID, p.AcceleratorID, p.RegionID, o.AcceleratorID, o.RegionID)
							}
						}
					}
					if n := res.Explanation.Considered; n != len(cands) {
						t.Errorf("%s (%s): %d offers considered, want %d", tc.name, how, n, len(cands))
					}
				}
			}
		})
	}
}

// TestCatalogueBeyondTheIndexIsRefused: a catalogue with more accelerators
// or regions than the index can address is refused when it is loaded,
// naming what is over and by how much, instead of misplacing offers.
func TestCatalogueBeyondTheIndexIsRefused(t *testing.T) {
	if err := checkCatalogue(accelerators, regions); err != nil {
		t.Fatalf("the shipped catalogue is refused: %v", err)
	}
	for _, tc := range []struct {
		nAcc, nReg int
		want       string // "" for accepted
	}{
		{256, 256, ""},
		{257, 20, "257 accelerators"},
		{17, 257, "257 regions"},
	} {
		accs, regs := grownCatalogue(tc.nAcc, tc.nReg)
		err := checkCatalogue(accs, regs)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%d × %d refused: %v", tc.nAcc, tc.nReg, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "at most 256")):
			t.Errorf("%d × %d: %v; want an error naming %q and the limit of 256", tc.nAcc, tc.nReg, err, tc.want)
		}
	}
}

// TestIndexSetCommitmentsEqualsLoad: an index told each offer's whole
// commitment list after every change (twice over, as a replica hears its
// own changes back) matches one loaded at once, for listed offers and for
// offers paused while they had commitments.
func TestIndexSetCommitmentsEqualsLoad(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	follow := NewIndex()
	final := map[int64]Candidate{}
	var commits []Commitment
	of := func(id int64) []Commitment {
		var out []Commitment
		for _, c := range commits {
			if c.OfferID == id {
				out = append(out, c)
			}
		}
		return out
	}
	for i := range 500 {
		id := int64(1 + rng.IntN(40))
		switch i % 3 {
		case 0:
			c := Candidate{Offer: randomOffer(rng, id)}
			if rng.IntN(4) == 0 {
				c.Offer.State = OfferPaused
				delete(final, id)
			} else {
				final[id] = c
			}
			if err := follow.Upsert(c); err != nil {
				t.Fatal(err)
			}
		case 1:
			c := Commitment{OfferID: id, Devices: 1 + rng.IntN(2), Start: t0.Add(time.Duration(rng.IntN(20)) * time.Hour)}
			c.End = c.Start.Add(3 * time.Hour)
			commits = append(commits, c)
		case 2:
			for j, c := range commits {
				if c.OfferID == id {
					commits = append(commits[:j], commits[j+1:]...)
					break
				}
			}
		}
		for range 2 {
			follow.SetCommitments(id, of(id))
		}
	}
	var cands []Candidate
	for _, c := range final {
		cands = append(cands, c)
	}
	bulk := NewIndex()
	if err := bulk.Load(cands, commits); err != nil {
		t.Fatal(err)
	}
	if follow.Len() != bulk.Len() {
		t.Fatalf("following %d offers, bulk %d", follow.Len(), bulk.Len())
	}
	for _, kind := range []WorkloadKind{WorkTraining, WorkBatch} {
		for _, devices := range []int{1, 4, 8} {
			req := Request{Workload: Workload{Kind: kind, Devices: devices, Hours: 4}}
			a, err := follow.Match(req, t0)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := bulk.Match(req, t0)
			if len(a.Quotes) == 0 || fmtResult(a) != fmtResult(b) {
				t.Fatalf("%s × %d: following and bulk differ or are empty:\n%s\n%s", kind, devices, fmtResult(a), fmtResult(b))
			}
		}
	}
}

package market

import (
	"math/rand/v2"
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
				n := res.Explanation.Fit
				for _, e := range res.Explanation.Eliminated {
					n += e.Count
				}
				if n != res.Explanation.Considered {
					t.Errorf("counts %d != considered %d", n, res.Explanation.Considered)
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
		if len(a.Quotes) == 0 || fmtResult(a) != fmtResult(b) {
			t.Fatalf("%s: incremental and bulk differ or are empty:\n%s\n%s", kind, fmtResult(a), fmtResult(b))
		}
	}
}

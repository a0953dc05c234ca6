package market

import (
	"encoding/csv"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Benchmarks run only with -bench:
//
//	go test -run '^$' -bench . -benchtime 400x ./market
//
// Offer shapes come from the Alibaba PAI GPU cluster trace (node GPU counts
// and models; pod lifetimes for commitment lengths) when
// ../../shared/data is present, else from the same distribution built in.

const traceDir = "../../shared/data/alibaba-gpu-v2023/csv/"

// traceShape is one node shape: devices per node and the accelerator.
type traceShape struct {
	dpn int
	acc string
}

// traceModel maps the trace's GPU models onto the catalogue. G2 and G3
// are undisclosed in the trace; we read them as A100 and H100 generations.
var traceModel = map[string]string{
	"P100": "nvidia-p100-16gb-pcie", "T4": "nvidia-t4-16gb-pcie", "V100M16": "nvidia-v100-16gb-pcie",
	"V100M32": "nvidia-v100-32gb-sxm", "A10": "nvidia-a10-24gb-pcie",
	"G2": "nvidia-a100-80gb-sxm", "G3": "nvidia-h100-80gb-sxm",
}

// builtinShapes is the trace's node list in counts, for when the file is absent.
var builtinShapes = []struct {
	n int
	s traceShape
}{
	{549, traceShape{8, "G2"}}, {387, traceShape{2, "T4"}}, {131, traceShape{2, "P100"}}, {39, traceShape{8, "G3"}},
	{28, traceShape{4, "V100M16"}}, {21, traceShape{8, "V100M32"}}, {19, traceShape{1, "V100M16"}},
	{17, traceShape{4, "T4"}}, {9, traceShape{4, "V100M32"}}, {8, traceShape{8, "V100M16"}},
	{3, traceShape{1, "P100"}}, {2, traceShape{1, "A10"}},
}

type workloadShapes struct {
	nodes     []traceShape
	lifetimes []int64 // pod lifetimes in hours, ≥ 1
	source    string
}

var (
	shapesOnce sync.Once
	shapes     workloadShapes
)

func loadShapes() workloadShapes {
	shapesOnce.Do(func() {
		shapes.source = "Alibaba PAI trace (" + traceDir + ")"
		if rows, err := readCSV(traceDir + "openb_node_list_gpu_node.csv"); err == nil {
			for _, r := range rows[1:] {
				n, _ := strconv.Atoi(r[3])
				shapes.nodes = append(shapes.nodes, traceShape{n, traceModel[r[4]]})
			}
		}
		if rows, err := readCSV(traceDir + "openb_pod_list_default.csv"); err == nil {
			for _, r := range rows[1:] {
				c, _ := strconv.ParseInt(r[8], 10, 64)
				d, _ := strconv.ParseInt(r[9], 10, 64)
				if h := (d - c) / 3600; d > c {
					shapes.lifetimes = append(shapes.lifetimes, max(1, min(h, 24*14)))
				}
			}
		}
		if len(shapes.nodes) == 0 || len(shapes.lifetimes) == 0 {
			shapes.source = "built-in copy of the trace's node distribution (trace files not found)"
			shapes.nodes = nil
			for _, b := range builtinShapes {
				for range b.n {
					shapes.nodes = append(shapes.nodes, traceShape{b.s.dpn, traceModel[b.s.acc]})
				}
			}
			shapes.lifetimes = []int64{1, 1, 2, 3, 5, 8, 12, 24, 48, 96, 168, 336}
		}
	})
	return shapes
}

func readCSV(path string) ([][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return csv.NewReader(f).ReadAll()
}

// modernShapes spread the rest of the catalogue over the market, so a few
// dozen (accelerator, memory) kinds appear, not only the trace's.
var modernAccs = []string{
	"nvidia-b200-192gb-sxm", "nvidia-h200-141gb-sxm", "nvidia-h100-80gb-sxm", "nvidia-h100-80gb-pcie",
	"nvidia-a100-40gb-pcie", "nvidia-l40s-48gb-pcie", "nvidia-l4-24gb-pcie", "nvidia-rtx4090-24gb-pcie",
	"nvidia-rtx3090-24gb-pcie", "amd-mi300x-192gb-oam", "amd-mi250x-128gb-oam",
}

var benchNow = time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC)

// benchOffer is offer id of a synthetic market shaped by the trace.
func benchOffer(id int64, seed uint64) Offer {
	rng := rand.New(rand.NewPCG(seed, uint64(id)))
	sh := loadShapes()
	node := sh.nodes[rng.IntN(len(sh.nodes))]
	accID := node.acc
	if rng.IntN(10) < 4 {
		accID = modernAccs[rng.IntN(len(modernAccs))]
	}
	acc, _ := FindAccelerator(accID)
	nodes := 1
	if rng.IntN(5) == 0 {
		nodes = 2 + rng.IntN(7)
	}
	region := regions[rng.IntN(len(regions))]
	base := int64(acc.BF16TFLOPS)/3 + 20 // cents per device-hour, roughly by speed
	price := Cents(base + rng.Int64N(base))
	o := Offer{
		ID: id, ProviderID: 1 + rng.Int64N(2000), Title: "bench",
		AcceleratorID: acc.ID, MemoryGB: acc.MemoryGB, DevicesPerNode: node.dpn, Nodes: nodes,
		Interconnect: InterconnectPCIe, NetworkID: "ethernet-100",
		CPUCores: 64, RAMGB: 512, StorageGB: 2000,
		DriverVersion: "550.54", CUDAVersion: "12.4", OSImage: "Ubuntu 22.04", ContainerRuntime: "Docker",
		RegionID: region.ID, CarbonGPerKWh: region.DefaultCarbon,
		AvailableFrom:  benchNow.Add(-time.Duration(rng.IntN(30*24)) * time.Hour),
		AvailableUntil: benchNow.Add(time.Duration(7*24+rng.IntN(180*24)) * time.Hour),
		MinRentalHours: 1, MaxRentalHours: 24 * (7 + rng.IntN(60)), ProvisioningMins: 5 + rng.IntN(25),
		PriceCentsPerDeviceHour: price, StorageCentsPerGBMonth: Cents(2 + rng.IntN(8)), EgressCentsPerGB: Cents(rng.IntN(9)),
		BillingBasis: BillingWallClock, UptimeBP: 9950, Review: ReviewApproved, State: OfferActive,
	}
	if node.dpn > 1 && acc.FormFactor != "PCIe" {
		o.Interconnect = InterconnectNVLink
	}
	if nodes > 1 && rng.IntN(2) == 0 {
		o.PlacementGroup, o.NetworkID = true, "infiniband-400"
	}
	if rng.IntN(3) == 0 {
		o.Interruptible, o.InterruptibleCentsPerDH, o.PreemptNoticeMins = true, price*6/10, 2
	}
	return o
}

// benchMarket builds n candidates with 0–4 commitments each, each on
// whole nodes but its last.
func benchMarket(n int) ([]Candidate, []Commitment) {
	sh := loadShapes()
	cands := make([]Candidate, n)
	var commits []Commitment
	rng := rand.New(rand.NewPCG(99, uint64(n)))
	for i := range cands {
		o := benchOffer(int64(i+1), 7)
		cands[i] = Candidate{Offer: o, ReliabilityBP: 9000 + rng.IntN(1000)}
		for k := range rng.IntN(5) {
			s := benchNow.Add(time.Duration(rng.IntN(10*24)-48) * time.Hour)
			h := sh.lifetimes[rng.IntN(len(sh.lifetimes))]
			c := Commitment{OfferID: o.ID, Devices: 1 + rng.IntN(o.Devices()),
				Start: s, End: s.Add(time.Duration(h) * time.Hour)}
			// On consecutive nodes from one chosen by id (not by rng, so
			// the market is the one measured before nodes), full but the last.
			for n, rest := (int(o.ID)+k)%o.Nodes, c.Devices; rest > 0; n = (n + 1) % o.Nodes {
				c.Nodes = append(c.Nodes, NodeShare{Node: n, Devices: min(rest, o.DevicesPerNode)})
				rest -= o.DevicesPerNode
			}
			commits = append(commits, c)
		}
	}
	return cands, commits
}

type benchIndex struct {
	idx         *Index
	bytesPerOff float64
	build       time.Duration
}

var (
	benchMu      sync.Mutex
	benchIndexes = map[int]*benchIndex{}
)

func getBenchIndex(b *testing.B, n int) *benchIndex {
	benchMu.Lock()
	defer benchMu.Unlock()
	if bi, ok := benchIndexes[n]; ok {
		return bi
	}
	for k := range benchIndexes {
		delete(benchIndexes, k) // one large index at a time
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	idx := NewIndex()
	cands, commits := benchMarket(n)
	if err := idx.Load(cands, commits); err != nil {
		b.Fatal(err)
	}
	build := time.Since(start)
	cands, commits = nil, nil
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	bi := &benchIndex{idx: idx, build: build, bytesPerOff: float64(after.HeapAlloc-before.HeapAlloc) / float64(n)}
	benchIndexes[n] = bi
	b.Logf("%d offers from %s: built in %s, %.0f bytes per offer", n, loadShapes().source, build.Round(time.Millisecond), bi.bytesPerOff)
	return bi
}

// narrowRequests name one model and one or two regions: the common search
// of a buyer who knows what she wants.
func narrowRequests() []Request {
	var out []Request
	models := []string{"nvidia-h100-80gb-sxm", "amd-mi300x-192gb-oam", "nvidia-l40s-48gb-pcie", "nvidia-a100-80gb-sxm"}
	for i := range 16 {
		r := regions[(i*7)%len(regions)]
		r2 := regions[(i*11+3)%len(regions)]
		out = append(out, Request{
			Workload: Workload{Kind: WorkTraining, Devices: []int{1, 2, 4, 8}[i%4], Hours: 24 + 12*(i%5),
				CheckpointMins: 30, RestartMins: 10, DatasetGB: 500, DataRegionID: r.ID},
			Constraints: Constraints{AcceleratorIDs: []string{models[i%len(models)]}, RegionIDs: []string{r.ID, r2.ID},
				MaxPricePerDeviceHour: Cents(600 + 50*(i%8)), Deadline: benchNow.Add(10 * 24 * time.Hour)},
			Preferences: Preferences{CostWeight: 60, StartWeight: 20, CarbonWeight: 20},
		})
	}
	return out
}

// broadRequests constrain little: any accelerator with enough memory,
// anywhere, split allowed.
func broadRequests() []Request {
	var out []Request
	for i := range 4 {
		out = append(out, Request{
			Workload: Workload{Kind: WorkBatch, Devices: 32 + 16*i, MinPieceDevices: 4, Hours: 48,
				CheckpointMins: 60, RestartMins: 10, DatasetGB: 1000},
			Constraints: Constraints{MinMemoryGB: 24, AllowInterruption: i%2 == 0},
			Preferences: Preferences{CostWeight: 70, ReliabilityWeight: 30},
		})
	}
	return out
}

// inferenceRequests are services on one model (those of the narrow
// requests), split in pieces of at least one or two devices, near the
// users of one region's geographic group, not spread across regions: so
// solved region by region.
func inferenceRequests() []Request {
	var out []Request
	models := []string{"nvidia-h100-80gb-sxm", "amd-mi300x-192gb-oam", "nvidia-l40s-48gb-pcie", "nvidia-a100-80gb-sxm"}
	for i := range 8 {
		r := regions[(i*5)%len(regions)]
		out = append(out, Request{
			Workload: Workload{Kind: WorkInference, Devices: 4 + 4*(i%4), MinPieceDevices: 1 + i%2, Hours: 24 * 7,
				CheckpointMins: 30, RestartMins: 10, DatasetGB: 200, DataRegionID: r.ID, UserRegionIDs: []string{r.ID}},
			Constraints: Constraints{AcceleratorIDs: []string{models[i%len(models)]}},
			Preferences: Preferences{CostWeight: 70, ReliabilityWeight: 30},
		})
	}
	return out
}

func BenchmarkMatch(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		for _, kind := range []string{"narrow", "broad", "inference"} {
			for _, how := range []string{"index", "exhaustive", "scan", "budget"} {
				b.Run(fmt.Sprintf("offers=%d/%s/%s", n, kind, how), func(b *testing.B) {
					bi := getBenchIndex(b, n)
					reqs := narrowRequests()
					switch kind {
					case "broad":
						reqs = broadRequests()
					case "inference":
						reqs = inferenceRequests()
					}
					run := bi.idx.Match
					switch how {
					case "exhaustive": // the index without the early stop: exact totals
						run = bi.idx.exhaustive
					case "scan":
						run = bi.idx.scan
					case "budget": // what the web layer serves
						run = func(r Request, now time.Time) (Result, error) {
							return bi.idx.MatchWithin(r, now, DefaultBudget)
						}
					}
					for _, r := range reqs { // warm the scratch pool
						if _, err := run(r, benchNow); err != nil {
							b.Fatal(err)
						}
					}
					runtime.GC() // the index build's garbage is not the query's
					lat := make([]time.Duration, 0, b.N)
					quotes := 0
					b.ReportAllocs()
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						t := time.Now()
						res, err := run(reqs[i%len(reqs)], benchNow)
						lat = append(lat, time.Since(t))
						if err != nil {
							b.Fatal(err)
						}
						quotes += len(res.Quotes)
					}
					b.StopTimer()
					slices.Sort(lat)
					b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
					b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds()), "p99-µs")
					b.ReportMetric(bi.bytesPerOff, "index-B/offer")
					b.ReportMetric(float64(quotes)/float64(b.N), "quotes/op")
				})
			}
		}
	}
}

// BenchmarkIndexUpdate measures incremental changes at 100,000 offers.
func BenchmarkIndexUpdate(b *testing.B) {
	bi := getBenchIndex(b, 100_000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		o := benchOffer(int64(1+i%100_000), uint64(i))
		o.ID = int64(1 + i%100_000)
		if err := bi.idx.Upsert(Candidate{Offer: o}); err != nil {
			b.Fatal(err)
		}
		c := Commitment{OfferID: o.ID, Devices: 1, Start: benchNow, End: benchNow.Add(time.Hour)}
		bi.idx.AddCommitment(c)
		bi.idx.RemoveCommitment(c)
	}
}

// BenchmarkWriterBesideRelaxations measures what a booking's index write
// (a commitment added and removed) waits while another goroutine runs, back
// to back, a broad request that nothing fits at 100,000 offers, whose
// relaxations re-run the engine many times: within the default budget and
// without one. The read lock is taken per run, so a writer waits for at
// most one run, not the whole request.
func BenchmarkWriterBesideRelaxations(b *testing.B) {
	for _, how := range []string{"budget", "unbounded"} {
		b.Run(how, func(b *testing.B) {
			bi := getBenchIndex(b, 100_000)
			req := broadRequests()[1]
			req.Constraints.Deadline = benchNow.Add(24 * time.Hour) // a 48-hour job
			budget := DefaultBudget
			if how == "unbounded" {
				budget = Budget{}
			}
			if res, err := bi.idx.MatchWithin(req, benchNow, budget); err != nil || len(res.Quotes) > 0 || len(res.Explanation.Relaxations) == 0 {
				b.Fatalf("want no quotes and some relaxations: %v, %d quotes", err, len(res.Quotes))
			}
			stop := make(chan struct{})
			done := make(chan []time.Duration)
			go func() {
				var took []time.Duration
				for {
					select {
					case <-stop:
						done <- took
						return
					default:
					}
					t := time.Now()
					if _, err := bi.idx.MatchWithin(req, benchNow, budget); err != nil {
						panic(err)
					}
					took = append(took, time.Since(t))
				}
			}()
			time.Sleep(10 * time.Millisecond)
			c := Commitment{OfferID: 1, Devices: 1, Start: benchNow, End: benchNow.Add(time.Hour)}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t := time.Now()
				bi.idx.AddCommitment(c)
				bi.idx.RemoveCommitment(c)
				lat = append(lat, time.Since(t))
				time.Sleep(time.Millisecond) // writes arrive now and then, as bookings do
			}
			b.StopTimer()
			close(stop)
			took := <-done
			slices.Sort(lat)
			slices.Sort(took)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "write-p50-µs")
			b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds()), "write-p99-µs")
			b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "write-max-µs")
			if len(took) > 0 {
				b.ReportMetric(float64(took[len(took)/2].Microseconds()), "request-p50-µs")
			}
		})
	}
}

package market

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The Alibaba PAI "openb" trace replayed against the matcher (see
// docs/matcher.md, "Packing on nodes"). Offers are the trace's GPU nodes,
// grouped in file order into offers of up to k nodes of one model and GPU
// count, with no costs beside the instance price. Pods arrive in the file's order, each a
// training job (a gang: one node) of its GPUs — a fraction of a GPU counts
// as one, the market sells whole devices — on the models its gpu_spec
// allows (any when empty), starting now for a week; nothing departs. The
// engine books its best quote on the nodes PlaceCommitments chooses.
// BestFit, the yardstick, puts each pod on the node of the whole cluster
// with the fewest free GPUs that hold it, the first such node in the order
// the offers list them on ties. Both stop when the pods that
// arrived ask for as many GPUs as the cluster has (100 % arrived demand);
// the figure is the share of the cluster's GPUs allocated then.

// traceDataDir is the trace's csv folder in the shared data, skipped
// outside CI when the shared folder is absent and failed in CI (as
// carbonDataDir).
func traceDataDir(t testing.TB) string {
	t.Helper()
	root := os.Getenv("GPUMARKET_SHARED_DATA")
	if root == "" {
		root = "../../shared/data"
	}
	if _, err := os.Stat(root); os.IsNotExist(err) {
		if inCI() {
			t.Fatalf("CI is set but the shared data folder %s is missing: the trace replay must run in CI; put the shared folder beside the checkout or set GPUMARKET_SHARED_DATA", root)
		}
		t.Skipf("shared data folder %s is not beside this checkout; set GPUMARKET_SHARED_DATA to run the trace replay", root)
	}
	return filepath.Join(root, "alibaba-gpu-v2023", "csv")
}

type traceNode struct {
	model string // the trace's name: G2, T4, …
	gpus  int
}

type tracePod struct {
	gpus   int      // whole devices
	models []string // allowed trace models; empty: any
}

func readTraceNodes(t testing.TB, dir string) []traceNode {
	t.Helper()
	rows, err := readCSV(filepath.Join(dir, "openb_node_list_gpu_node.csv"))
	if err != nil {
		t.Fatalf("trace nodes: %v", err)
	}
	var out []traceNode
	for _, r := range rows[1:] {
		n, err := strconv.Atoi(r[3])
		if err != nil || traceModel[r[4]] == "" {
			t.Fatalf("trace node %v: unreadable", r)
		}
		out = append(out, traceNode{model: r[4], gpus: n})
	}
	return out
}

// readTracePods reads the GPU pods of a pod list (columns num_gpu, gpu_milli
// and, where present, gpu_spec), in file order.
func readTracePods(t testing.TB, dir, file string) []tracePod {
	t.Helper()
	rows, err := readCSV(filepath.Join(dir, file))
	if err != nil {
		t.Fatalf("trace pods: %v", err)
	}
	var out []tracePod
	for _, r := range rows[1:] {
		n, err1 := strconv.Atoi(r[3])
		milli, err2 := strconv.Atoi(r[4])
		if err1 != nil || err2 != nil {
			t.Fatalf("trace pod %v: unreadable", r)
		}
		if n == 0 || milli == 0 {
			continue // CPU only
		}
		p := tracePod{gpus: n}
		if len(r) > 5 && r[5] != "" {
			p.models = strings.Split(r[5], "|")
		}
		out = append(out, p)
	}
	return out
}

func podAllows(p tracePod, model string) bool {
	return len(p.models) == 0 || inList(p.models, model)
}

// bestFitReplay places pods on nodes by BestFit and returns the GPUs
// allocated when arrived demand reaches capacity, and the capacity.
func bestFitReplay(nodes []traceNode, pods []tracePod) (int, int) {
	return nodeReplay(nodes, pods, func(free, best int) bool { return free < best })
}

// nodeReplay places each pod on the first node that holds it and is
// better than every other by better(free, best free so far): BestFit
// with "fewer", WorstFit with "more".
func nodeReplay(nodes []traceNode, pods []tracePod, better func(free, best int) bool) (int, int) {
	free := make([]int, len(nodes))
	capacity := 0
	for i, n := range nodes {
		free[i] = n.gpus
		capacity += n.gpus
	}
	allocated, arrived := 0, 0
	for _, p := range pods {
		if arrived >= capacity {
			break
		}
		arrived += p.gpus
		best := -1
		for i, n := range nodes {
			if free[i] >= p.gpus && podAllows(p, n.model) && (best < 0 || better(free[i], free[best])) {
				best = i
			}
		}
		if best >= 0 {
			free[best] -= p.gpus
			allocated += p.gpus
		}
	}
	return allocated, capacity
}

// traceOffers groups the nodes, in file order, into offers of up to
// perOffer nodes of one model and GPU count, priced by price, with no costs
// beside the instance price. It also returns the nodes as the offers list
// them (by offer, then node), the order BestFit breaks ties in.
func traceOffers(nodes []traceNode, perOffer int, price func(Accelerator) Cents) ([]Offer, []traceNode) {
	type group struct {
		model string
		gpus  int
	}
	var offers []Offer
	var models []string
	open := map[group]int{} // the offer still taking nodes, by model and size
	for _, n := range nodes {
		g := group{n.model, n.gpus}
		if i, ok := open[g]; ok && offers[i].Nodes < perOffer {
			offers[i].Nodes++
			continue
		}
		acc, _ := FindAccelerator(traceModel[n.model])
		open[g] = len(offers)
		models = append(models, n.model)
		offers = append(offers, Offer{
			ID: int64(len(offers) + 1), ProviderID: 1, Title: "trace " + n.model,
			AcceleratorID: acc.ID, MemoryGB: acc.MemoryGB, DevicesPerNode: n.gpus, Nodes: 1,
			Interconnect: InterconnectPCIe, NetworkID: "ethernet-100", RegionID: "us-west-or", CarbonGPerKWh: 100,
			DriverVersion: "550.54", CUDAVersion: "12.4",
			AvailableFrom: benchNow, AvailableUntil: benchNow.Add(30 * 24 * time.Hour), MinRentalHours: 1, MaxRentalHours: 30 * 24,
			PriceCentsPerDeviceHour: price(acc),
			BillingBasis:            BillingWallClock, Review: ReviewApproved, State: OfferActive,
		})
	}
	var order []traceNode
	for i, o := range offers {
		for range o.Nodes {
			order = append(order, traceNode{model: models[i], gpus: o.DevicesPerNode})
		}
	}
	return offers, order
}

// engineReplay books each pod's best quote on offers and returns the GPUs
// allocated when arrived demand reaches capacity.
func engineReplay(t testing.TB, offers []Offer, capacity int, pods []tracePod) int {
	t.Helper()
	now := benchNow
	const hours = 7 * 24
	idx := NewIndex()
	byID := map[int64]Offer{}
	for _, o := range offers {
		byID[o.ID] = o
		if err := idx.Upsert(Candidate{Offer: o, ReliabilityBP: 9900}); err != nil {
			t.Fatal(err)
		}
	}
	held := map[int64][]Commitment{}
	allocated, arrived := 0, 0
	for i, p := range pods {
		if arrived >= capacity {
			break
		}
		arrived += p.gpus
		req := Request{Workload: Workload{Kind: WorkTraining, Devices: p.gpus, Hours: hours},
			Constraints: Constraints{Deadline: now.Add(hours * time.Hour)}, Limit: 1}
		for _, m := range p.models {
			req.Constraints.AcceleratorIDs = append(req.Constraints.AcceleratorIDs, traceModel[m])
		}
		res, err := idx.Match(req, now)
		if err != nil {
			t.Fatalf("pod %d: %v", i, err)
		}
		if len(res.Quotes) == 0 {
			continue
		}
		c := res.Quotes[0].Pieces[0].Commitment()
		o := byID[c.OfferID]
		placed, err := PlaceCommitments(o, held[o.ID], []Commitment{c})
		if err != nil {
			t.Fatalf("pod %d: quoted on offer %d but not placed: %v", i, o.ID, err)
		}
		held[o.ID] = append(held[o.ID], placed[0])
		idx.AddCommitment(placed[0])
		allocated += p.gpus
	}
	return allocated
}

// TestTraceReplayPacksAsWellAsBestFit replays the three openb pod lists
// against offers of one node and of up to eight: with every offer at one
// price, so that packing alone decides, the engine allocates at least as
// many GPUs as BestFit over the same nodes at 100 % arrived demand. With prices by model
// (cheaper for slower models) buyers take the cheapest model first, which
// is a choice of cost, not of packing; that figure is logged.
func TestTraceReplayPacksAsWellAsBestFit(t *testing.T) {
	dir := traceDataDir(t)
	nodes := readTraceNodes(t, dir)
	onePrice := func(Accelerator) Cents { return 300 }
	byModel := func(a Accelerator) Cents { return Cents(a.BF16TFLOPS/3 + 20) }
	for _, sc := range []struct {
		file    string
		shuffle bool // the multi-GPU list appends its extra pods after the default's: shuffled, they arrive
	}{
		{"openb_pod_list_default.csv", false},
		{"openb_pod_list_gpuspec33.csv", false},
		{"openb_pod_list_multigpu50.csv", true},
	} {
		pods := readTracePods(t, dir, sc.file)
		name := sc.file
		if sc.shuffle {
			rng := rand.New(rand.NewPCG(2023, 10))
			rng.Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
			name += " (shuffled)"
		}
		_, capacity := bestFitReplay(nodes, pods)
		line := fmt.Sprintf("%s, %d GPUs on %d nodes:", name, capacity, len(nodes))
		for _, k := range []int{1, 8} {
			offers, order := traceOffers(nodes, k, onePrice)
			best, _ := bestFitReplay(order, pods)
			got := engineReplay(t, offers, capacity, pods)
			line += fmt.Sprintf(" offers of ≤ %d nodes (%d offers): engine %d (%s), BestFit %d (%s);", k, len(offers), got, percent(got, capacity), best, percent(best, capacity))
			if got < best {
				t.Errorf("%s, offers of ≤ %d nodes: the engine allocates %d GPUs, BestFit %d", name, k, got, best)
			}
		}
		offers, order := traceOffers(nodes, 8, byModel)
		got := engineReplay(t, offers, capacity, pods)
		worst, _ := nodeReplay(order, pods, func(free, best int) bool { return free > best })
		line += fmt.Sprintf(" priced by model, ≤ 8 nodes: engine %d (%s); WorstFit for scale %d (%s)", got, percent(got, capacity), worst, percent(worst, capacity))
		t.Log(line)
	}
}

func percent(n, of int) string {
	return strconv.FormatFloat(float64(n)*100/float64(of), 'f', 2, 64) + " %"
}

// BenchmarkTraceReplay measures placements per second on the openb replay
// of TestTraceReplayPacksAsWellAsBestFit (offers of up to 8 nodes at one
// price): the engine (Index.Match for each pod, then PlaceCommitments and
// AddCommitment for its best quote, as a booking does) against the bare
// BestFit loop, each over the pods that arrive until they ask for the
// cluster's GPUs, with the share of the GPUs each allocates:
//
//	go test -run '^$' -bench TraceReplay -benchtime 3x ./market
func BenchmarkTraceReplay(b *testing.B) {
	dir := traceDataDir(b)
	nodes := readTraceNodes(b, dir)
	for _, file := range []string{"openb_pod_list_default.csv", "openb_pod_list_gpuspec33.csv", "openb_pod_list_multigpu50.csv"} {
		pods := readTracePods(b, dir, file)
		if file == "openb_pod_list_multigpu50.csv" {
			rng := rand.New(rand.NewPCG(2023, 10))
			rng.Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
		}
		_, capacity := bestFitReplay(nodes, pods)
		offers, order := traceOffers(nodes, 8, func(Accelerator) Cents { return 300 })
		arrived, demand := 0, 0
		for _, p := range pods {
			if demand >= capacity {
				break
			}
			demand += p.gpus
			arrived++
		}
		name := strings.TrimSuffix(strings.TrimPrefix(file, "openb_pod_list_"), ".csv")
		for _, how := range []string{"engine", "bestfit"} {
			b.Run(name+"/"+how, func(b *testing.B) {
				allocated := 0
				cpu := processCPU()
				for i := 0; i < b.N; i++ {
					if how == "engine" {
						allocated = engineReplay(b, offers, capacity, pods)
					} else {
						allocated, _ = bestFitReplay(order, pods)
					}
				}
				b.ReportMetric(float64(arrived)*float64(b.N)/b.Elapsed().Seconds(), "placements/s")
				// Per second of the process's CPU (the garbage collector's
				// included), which the machine's other load hardly moves.
				if cpu = processCPU() - cpu; cpu > 0 {
					b.ReportMetric(float64(arrived)*float64(b.N)/cpu.Seconds(), "placements/cpu-s")
				}
				b.ReportMetric(float64(allocated)*100/float64(capacity), "alloc-%")
			})
		}
	}
}

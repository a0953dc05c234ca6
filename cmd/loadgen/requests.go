package main

import (
	"net/url"
	"strconv"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// anonQueries are the broad requests as the request builder's query
// strings: any accelerator with 24 GB, anywhere, split allowed.
var anonQueries = func() []string {
	var out []string
	for i := range 4 {
		q := url.Values{"workload.kind": {"batch"}, "workload.devices": {strconv.Itoa(32 + 16*i)}, "workload.min_piece_devices": {"4"},
			"workload.hours": {"48"}, "workload.checkpoint_mins": {"60"}, "workload.restart_mins": {"10"}, "workload.dataset_gb": {"1000"},
			"constraints.min_memory_gb": {"24"}, "preferences.cost_weight": {"70"}, "preferences.reliability_weight": {"30"}}
		if i%2 == 0 {
			q.Set("constraints.allow_interruption", "1")
		}
		out = append(out, q.Encode())
	}
	return out
}()

// requestBodies returns the portable request JSON of the narrow and broad
// requests, with deadlines relative to now.
func requestBodies(now time.Time) (map[string][][]byte, error) {
	regions := market.Regions()
	models := []string{"nvidia-h100-80gb-sxm", "amd-mi300x-192gb-oam", "nvidia-l40s-48gb-pcie", "nvidia-a100-80gb-sxm"}
	var narrow, broad []market.Request
	// Narrow: one model, two regions, a price cap: a buyer who knows
	// what she wants.
	for i := range 16 {
		r, r2 := regions[(i*7)%len(regions)], regions[(i*11+3)%len(regions)]
		narrow = append(narrow, market.Request{
			Workload: market.Workload{Kind: market.WorkTraining, Devices: []int{1, 2, 4, 8}[i%4], Hours: 24 + 12*(i%5),
				CheckpointMins: 30, RestartMins: 10, DatasetGB: 500, DataRegionID: r.ID},
			Constraints: market.Constraints{AcceleratorIDs: []string{models[i%len(models)]}, RegionIDs: []string{r.ID, r2.ID},
				MaxPricePerDeviceHour: market.Cents(600 + 50*(i%8)), Deadline: now.Add(10 * 24 * time.Hour).Truncate(time.Hour)},
			Preferences: market.Preferences{CostWeight: 60, StartWeight: 20, CarbonWeight: 20},
		})
	}
	// Broad: any accelerator with enough memory, anywhere, split allowed.
	for i := range 4 {
		broad = append(broad, market.Request{
			Workload: market.Workload{Kind: market.WorkBatch, Devices: 32 + 16*i, MinPieceDevices: 4, Hours: 48,
				CheckpointMins: 60, RestartMins: 10, DatasetGB: 1000},
			Constraints: market.Constraints{MinMemoryGB: 24, AllowInterruption: i%2 == 0},
			Preferences: market.Preferences{CostWeight: 70, ReliabilityWeight: 30},
		})
	}
	out := map[string][][]byte{}
	for name, rs := range map[string][]market.Request{"narrow": narrow, "broad": broad} {
		for _, r := range rs {
			b, err := market.EncodeRequestJSON(r)
			if err != nil {
				return nil, err
			}
			out[name] = append(out[name], b)
		}
	}
	return out, nil
}

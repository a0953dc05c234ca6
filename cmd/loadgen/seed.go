package main

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// nodeShape is one node of the market: accelerator, devices, CPU and RAM.
type nodeShape struct {
	acc         string
	devices     int
	cpus, ramGB int
}

// traceModels maps the trace's GPU models onto the catalogue. G2 and G3
// are undisclosed in the trace; we read them as A100 and H100 generations.
var traceModels = map[string]string{
	"P100": "nvidia-p100-16gb-pcie", "T4": "nvidia-t4-16gb-pcie", "V100M16": "nvidia-v100-16gb-pcie",
	"V100M32": "nvidia-v100-32gb-sxm", "A10": "nvidia-a10-24gb-pcie",
	"G2": "nvidia-a100-80gb-sxm", "G3": "nvidia-h100-80gb-sxm",
}

// modernModels spread the rest of the catalogue over the market.
var modernModels = []string{
	"nvidia-b200-192gb-sxm", "nvidia-h200-141gb-sxm", "nvidia-h100-80gb-sxm", "nvidia-h100-80gb-pcie",
	"nvidia-a100-40gb-pcie", "nvidia-l40s-48gb-pcie", "nvidia-l4-24gb-pcie", "nvidia-rtx4090-24gb-pcie",
	"nvidia-rtx3090-24gb-pcie", "amd-mi300x-192gb-oam", "amd-mi250x-128gb-oam",
}

// readShapes reads node shapes from the trace's GPU node list in dir, at
// run time (the data is not part of the repository), or returns the
// trace's distribution in counts when the file is absent.
func readShapes(dir string) ([]nodeShape, string) {
	if f, err := os.Open(filepath.Join(dir, "openb_node_list_gpu_node.csv")); err == nil {
		defer f.Close()
		rows, err := csv.NewReader(f).ReadAll()
		var out []nodeShape
		if err == nil && len(rows) > 1 {
			for _, r := range rows[1:] { // sn, cpu_milli, memory_mib, gpu, model
				if len(r) < 5 {
					continue
				}
				cpu, _ := strconv.Atoi(r[1])
				mem, _ := strconv.Atoi(r[2])
				n, _ := strconv.Atoi(r[3])
				if acc, ok := traceModels[r[4]]; ok && n > 0 {
					out = append(out, nodeShape{acc, n, max(1, cpu/1000), max(1, mem/1024)})
				}
			}
		}
		if len(out) > 0 {
			return out, "Alibaba GPU trace " + f.Name()
		}
	}
	var out []nodeShape
	for _, b := range []struct {
		n int
		s nodeShape
	}{
		{549, nodeShape{"G2", 8, 96, 768}}, {387, nodeShape{"T4", 2, 96, 384}}, {131, nodeShape{"P100", 2, 64, 256}},
		{39, nodeShape{"G3", 8, 128, 1024}}, {28, nodeShape{"V100M16", 4, 96, 384}}, {21, nodeShape{"V100M32", 8, 96, 768}},
		{19, nodeShape{"V100M16", 1, 32, 128}}, {17, nodeShape{"T4", 4, 96, 384}}, {9, nodeShape{"V100M32", 4, 96, 384}},
		{8, nodeShape{"V100M16", 8, 96, 768}}, {3, nodeShape{"P100", 1, 32, 128}}, {2, nodeShape{"A10", 1, 32, 128}},
	} {
		for range b.n {
			s := b.s
			s.acc = traceModels[s.acc]
			out = append(out, s)
		}
	}
	return out, "built-in copy of the trace's node distribution (trace not found in " + dir + ")"
}

// seedMarket creates a database with n listed offers shaped by the trace
// from a few hundred providers, and a buyer with a read API token, which
// it prints.
func seedMarket(ctx context.Context, path string, n int, traceDir, tokenOut string, stdout io.Writer) error {
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("%s exists; seed a new database (delete it first)", path)
	}
	db, err := store.Open(ctx, path)
	if err != nil {
		return err
	}
	defer db.Close()
	now := time.Now().UTC()
	shapes, source := readShapes(traceDir)
	fmt.Fprintf(stdout, "seeding %d offers into %s; shapes from %s\n", n, path, source)

	const providers = 500
	provIDs := make([]int64, providers)
	for i := range provIDs {
		u, err := db.CreateUser(ctx, market.User{Email: fmt.Sprintf("provider%d@load.gpumarket.test", i),
			DisplayName: fmt.Sprintf("Load provider %d", i), IsProvider: true}, []byte("not a password hash"), now)
		if err != nil {
			return err
		}
		provIDs[i] = u.ID
	}
	rng := rand.New(rand.NewPCG(7, uint64(n)))
	regions := market.Regions()
	const chunk = 5000
	start := time.Now()
	for done := 0; done < n; {
		batch := make([]market.Offer, 0, min(chunk, n-done))
		for len(batch) < cap(batch) {
			o := loadOffer(rng, shapes, regions, now)
			o.ProviderID = provIDs[rng.IntN(providers)]
			if err := market.ValidateOffer(&o, now); err != nil {
				return fmt.Errorf("generated offer %+v: %w", o, err)
			}
			o.Review, o.State = market.ReviewApproved, market.OfferActive
			batch = append(batch, o)
		}
		if _, err := db.ImportOffers(ctx, batch, now); err != nil {
			return err
		}
		done += len(batch)
	}
	fmt.Fprintf(stdout, "%d offers stored in %s\n", n, time.Since(start).Round(time.Millisecond))

	buyer, err := db.CreateUser(ctx, market.User{Email: "buyer@load.gpumarket.test", DisplayName: "Load buyer", IsBuyer: true},
		[]byte("not a password hash"), now)
	if err != nil {
		return err
	}
	_, raw, err := db.CreateAPIToken(ctx, buyer.ID, "loadgen", "read", now)
	if err != nil {
		return err
	}
	if tokenOut != "" {
		if err := os.WriteFile(tokenOut, []byte(raw+"\n"), 0o600); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "token: %s\n", raw)
	return nil
}

// loadOffer is one offer on a node shape from the trace; four in ten get a
// modern accelerator instead, so the whole catalogue appears.
func loadOffer(rng *rand.Rand, shapes []nodeShape, regions []market.Region, now time.Time) market.Offer {
	node := shapes[rng.IntN(len(shapes))]
	accID := node.acc
	if rng.IntN(10) < 4 {
		accID = modernModels[rng.IntN(len(modernModels))]
	}
	acc, _ := market.FindAccelerator(accID)
	nodes := 1
	if rng.IntN(5) == 0 {
		nodes = 2 + rng.IntN(7)
	}
	region := regions[rng.IntN(len(regions))]
	base := int64(acc.BF16TFLOPS)/3 + 20 // cents per device-hour, roughly by speed
	price := market.Cents(base + rng.Int64N(base))
	ic, network := market.InterconnectPCIe, "none"
	if node.devices > 1 && acc.FormFactor != "PCIe" {
		ic = market.InterconnectNVLink
	}
	if nodes > 1 {
		network = "ethernet-100"
		if rng.IntN(2) == 0 {
			network = "infiniband-400"
		}
	}
	driver, cuda := "550.90", "12.4"
	if acc.Stack == "rocm" {
		driver, cuda = "6.7.0", "6.1"
	}
	from := now.Truncate(time.Hour).Add(time.Duration(rng.IntN(72)) * time.Hour)
	o := market.Offer{
		Title:         fmt.Sprintf("%d× %s, %s", node.devices*nodes, acc.Name, region.Name),
		AcceleratorID: acc.ID, MemoryGB: acc.MemoryGB, DevicesPerNode: node.devices, Nodes: nodes,
		Interconnect: ic, NetworkID: network, PlacementGroup: nodes > 1 && network == "infiniband-400",
		CPUCores: node.cpus, RAMGB: node.ramGB, StorageGB: 2000,
		DriverVersion: driver, CUDAVersion: cuda, OSImage: "Ubuntu 22.04", ContainerRuntime: "Docker",
		RegionID: region.ID, AvailableFrom: from, AvailableUntil: from.Add(time.Duration(7*24+rng.IntN(180*24)) * time.Hour),
		MinRentalHours: 1, MaxRentalHours: 24 * (7 + rng.IntN(60)), ProvisioningMins: 5 + rng.IntN(25),
		PriceCentsPerDeviceHour: price, StorageCentsPerGBMonth: market.Cents(2 + rng.IntN(8)), EgressCentsPerGB: market.Cents(rng.IntN(9)),
		BillingBasis: market.BillingWallClock, UptimeBP: 9950,
		CreditSchedule: []market.CreditTier{{BelowBP: 9950, CreditBP: 1000}, {BelowBP: 9900, CreditBP: 2500}},
		CreditCapBP:    10000, FreeCancelHours: 24, CancelFeeBP: 2500,
		RejectMinutes: market.DefaultRejectMinutes,
	}
	if rng.IntN(3) == 0 {
		o.Interruptible, o.InterruptibleCentsPerDH, o.PreemptNoticeMins = true, price*6/10, 2
	}
	return o
}

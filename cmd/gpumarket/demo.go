package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/account"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// demoCredential is one demo account as printed to the console.
type demoCredential struct {
	Role     string `json:"role"`
	Email    string `json:"email"`
	Password string `json:"password"`
	// TOTPSecret is the demo admin's two-factor key (demoTwoFactor).
	TOTPSecret string `json:"totp_secret,omitempty"`
}

const demoSettingKey = "demo_credentials"

type demoProvider struct {
	email, name, org string
	offers           []market.Offer
}

// seedDemo loads the demo data once (several providers with realistic
// offers, a buyer and an admin) and returns the demo credentials. Passwords
// are random per database, generated at first seeding and kept in the
// settings table so a restart can print them again; they exist only in demo
// databases.
func seedDemo(ctx context.Context, db *store.DB, now time.Time) ([]demoCredential, error) {
	if saved, err := db.GetSetting(ctx, demoSettingKey); err == nil && saved != "" {
		var creds []demoCredential
		if err := json.Unmarshal([]byte(saved), &creds); err != nil {
			return nil, fmt.Errorf("read saved demo credentials: %w", err)
		}
		return creds, nil
	} else if err != nil && market.ErrorCode(err) != market.CodeNotFound {
		return nil, err
	}

	var creds []demoCredential
	newUser := func(role string, u market.User) (market.User, error) {
		pw, err := randomPassword()
		if err != nil {
			return market.User{}, err
		}
		hash, err := account.Hash(pw, account.DefaultCost)
		if err != nil {
			return market.User{}, err
		}
		created, err := db.CreateUser(ctx, u, hash, now)
		if err != nil {
			return market.User{}, fmt.Errorf("create %s: %w", u.Email, err)
		}
		creds = append(creds, demoCredential{Role: role, Email: u.Email, Password: pw})
		return created, nil
	}

	admin, err := newUser("admin", market.User{Email: "admin@demo.gpumarket.test", DisplayName: "Demo Admin", IsBuyer: true, IsAdmin: true})
	if err != nil {
		return nil, err
	}
	// The starting templates (docs/runtime.md), public, by the demo's admin.
	for _, t := range market.DemoTemplates {
		if _, err := db.SaveTemplate(ctx, admin.ID, t, now); err != nil {
			return nil, fmt.Errorf("demo template %q: %w", t.Name, err)
		}
	}
	if _, err := newUser("buyer", market.User{Email: "buyer@demo.gpumarket.test", DisplayName: "Ada Research", Organisation: "Lovelace ML Lab", IsBuyer: true}); err != nil {
		return nil, err
	}
	start := now.Truncate(time.Hour)
	for i, p := range demoProviders(start) {
		u, err := newUser("provider", market.User{Email: p.email, DisplayName: p.name, Organisation: p.org, IsProvider: true})
		if err != nil {
			return nil, err
		}
		for _, o := range p.offers {
			o.ProviderID = u.ID
			if i == 0 { // the first provider runs buyers' containers, so the templates find offers
				o.Containers = market.ContainerSupport{Engine: market.EnginePodman, CDI: true, MaxImageGB: 50, ImageCache: true}
			}
			if err := market.ValidateOffer(&o, now); err != nil {
				return nil, fmt.Errorf("demo offer %q: %w", o.Title, err)
			}
			created, err := db.CreateOffer(ctx, o, now)
			if err != nil {
				return nil, err
			}
			if err := db.ReviewOffer(ctx, created.ID, market.ReviewApproved, "", now); err != nil {
				return nil, err
			}
		}
	}
	if err := seedDemoHistory(ctx, db, now); err != nil {
		return nil, err
	}
	b, err := json.Marshal(creds)
	if err != nil {
		return nil, err
	}
	if err := db.SetSetting(ctx, demoSettingKey, string(b)); err != nil {
		return nil, err
	}
	return creds, nil
}

func randomPassword() (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// demoOffer returns an offer with common terms filled in; the caller sets
// what makes it distinct.
func demoOffer(start time.Time, title, acc string, perNode, nodes int, region string, cents market.Cents) market.Offer {
	a, _ := market.FindAccelerator(acc)
	ic := market.InterconnectNVLink
	if a.FormFactor == "PCIe" || perNode == 1 {
		ic = market.InterconnectPCIe
	}
	network := "none"
	if nodes > 1 {
		network = "ethernet-100"
	}
	driver, cuda := "550.90", "12.4"
	if a.Stack == "rocm" {
		driver, cuda = "6.7.0", "6.1"
	}
	return market.Offer{
		Title: title, AcceleratorID: acc, MemoryGB: a.MemoryGB, DevicesPerNode: perNode, Nodes: nodes,
		Interconnect: ic, NetworkID: network, CPUCores: 16 * perNode, RAMGB: 128 * perNode, StorageGB: 2000 * perNode,
		DriverVersion: driver, CUDAVersion: cuda, OSImage: "Ubuntu 22.04", ContainerRuntime: "Docker 26 + NVIDIA Container Toolkit",
		RegionID: region, AvailableFrom: start, AvailableUntil: start.AddDate(0, 4, 0),
		MinRentalHours: 1, MaxRentalHours: 24 * 60, ProvisioningMins: 10,
		PriceCentsPerDeviceHour: cents, StorageCentsPerGBMonth: 8, EgressCentsPerGB: 5,
		BillingBasis: market.BillingWallClock, UptimeBP: 9950,
		CreditSchedule: []market.CreditTier{{BelowBP: 9950, CreditBP: 1000}, {BelowBP: 9900, CreditBP: 2500}, {BelowBP: 9500, CreditBP: 10000}},
		CreditCapBP:    10000, FreeCancelHours: 24, CancelFeeBP: 2500,
		RejectMinutes: market.DefaultRejectMinutes,
	}
}

func demoProviders(start time.Time) []demoProvider {
	interruptible := func(o market.Offer, cents market.Cents) market.Offer {
		o.Interruptible, o.InterruptibleCentsPerDH, o.PreemptNoticeMins = true, cents, 5
		return o
	}
	cluster := func(o market.Offer, network string) market.Offer {
		o.NetworkID, o.PlacementGroup = network, true
		return o
	}
	estimated := func(o market.Offer, k market.FigureKind, v int64, method string) market.Offer {
		o.Figures = append(o.Figures, market.Figure{Kind: k, Value: v, Basis: market.FigureEstimated, Method: method})
		return o
	}
	guaranteed := func(o market.Offer, k market.FigureKind, v int64) market.Offer {
		o.Figures = append(o.Figures, market.Figure{Kind: k, Value: v, Basis: market.FigureGuaranteed})
		return o
	}

	nordic := []market.Offer{
		cluster(estimated(demoOffer(start, "H100 SXM cluster, 4 nodes on InfiniBand, hydro power", "nvidia-h100-80gb-sxm", 8, 4, "eu-north-se", 239),
			market.FigureAllReduce, 370, "nccl-tests all_reduce_perf, 32 GPUs, 1 GiB messages"), "infiniband-400"),
		estimated(demoOffer(start, "A100 80GB SXM node, Stockholm", "nvidia-a100-80gb-sxm", 8, 1, "eu-north-se", 139),
			market.FigureRelThroughput, 1000, "reference by definition"),
		interruptible(demoOffer(start, "L40S inference pool, Finland", "nvidia-l40s-48gb-pcie", 4, 3, "eu-north-fi", 89), 52),
		cluster(demoOffer(start, "H200 SXM pair of nodes, Iceland geothermal", "nvidia-h200-141gb-sxm", 8, 2, "eu-north-is", 329), "infiniband-400"),
	}
	nordic[0].PowerNote = "100% hydro PPA; curtailment possible on grid alerts"
	nordic[3].PowerNote = "Geothermal and hydro"

	us := []market.Offer{
		cluster(guaranteed(demoOffer(start, "8× H100 SXM, Virginia, RoCE fabric", "nvidia-h100-80gb-sxm", 8, 2, "us-east-va", 219),
			market.FigureBF16TFLOPS, 900), "roce-400"),
		demoOffer(start, "B200 HGX node, Texas", "nvidia-b200-192gb-sxm", 8, 1, "us-south-tx", 499),
		interruptible(demoOffer(start, "A100 40GB PCIe spares, Oregon", "nvidia-a100-40gb-pcie", 4, 2, "us-west-or", 95), 55),
		demoOffer(start, "MI300X OAM node, Illinois", "amd-mi300x-192gb-oam", 8, 1, "us-central-il", 229),
		interruptible(demoOffer(start, "L4 inference boxes, California", "nvidia-l4-24gb-pcie", 2, 6, "us-west-ca", 48), 29),
	}
	us[1].BillingBasis = market.BillingCommittedBlock
	us[1].MinRentalHours = 24

	community := []market.Offer{
		interruptible(estimated(demoOffer(start, "RTX 4090 workstation ×2, Frankfurt", "nvidia-rtx4090-24gb-pcie", 2, 1, "eu-central-de", 39),
			market.FigureTokensPerSec, 2400, "vLLM 0.6, Llama 3.1 8B FP16, batch 32, p50"), 24),
		interruptible(demoOffer(start, "RTX 3090 home lab, Amsterdam", "nvidia-rtx3090-24gb-pcie", 1, 1, "eu-west-nl", 22), 14),
		demoOffer(start, "A10 ×4 inference server, Dublin", "nvidia-a10-24gb-pcie", 4, 1, "eu-west-ie", 55),
		interruptible(demoOffer(start, "T4 batch fleet, Paris", "nvidia-t4-16gb-pcie", 4, 4, "eu-west-fr", 19), 11),
	}
	community[0].UptimeBP = 9900
	community[0].CreditSchedule = []market.CreditTier{{BelowBP: 9900, CreditBP: 1000}, {BelowBP: 9500, CreditBP: 5000}}
	community[1].UptimeBP = 9800
	community[1].CreditSchedule = []market.CreditTier{{BelowBP: 9800, CreditBP: 1000}}
	community[1].BillingBasis = market.BillingSuccessfulWork
	// A home lab runs no agent: the provider hands over access by hand.
	community[1].Access = market.AccessManual
	community[1].AccessInstructions = "No agent here: after paying, send your SSH public key in the reservation's messages. " +
		"I add it within an hour of the start and reply with the host and port; I remove it when the rental ends."

	asia := []market.Offer{
		demoOffer(start, "H100 PCIe ×4, Tokyo", "nvidia-h100-80gb-pcie", 4, 1, "ap-northeast-jp", 259),
		interruptible(demoOffer(start, "V100 32GB SXM2 training node, Singapore", "nvidia-v100-32gb-sxm", 8, 1, "ap-southeast-sg", 49), 29),
		demoOffer(start, "A100 80GB SXM, Mumbai", "nvidia-a100-80gb-sxm", 8, 1, "ap-south-in", 119),
	}

	return []demoProvider{
		{email: "nordic@demo.gpumarket.test", name: "Nordic Compute", org: "Nordic Compute AB", offers: nordic},
		{email: "atlantic@demo.gpumarket.test", name: "Atlantic GPU Cloud", org: "Atlantic GPU Inc.", offers: us},
		{email: "lab@demo.gpumarket.test", name: "Community Labs", org: "", offers: community},
		{email: "pacific@demo.gpumarket.test", name: "Pacific Racks", org: "Pacific Racks Pte", offers: asia},
	}
}

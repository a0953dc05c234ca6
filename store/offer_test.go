package store

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// validOffer returns an offer of the provider that market.ValidateOffer
// accepts at t0.
func validOffer(providerID int64) market.Offer {
	return market.Offer{
		ProviderID:              providerID,
		Title:                   "8× H100 SXM in Oregon",
		AcceleratorID:           "nvidia-h100-80gb-sxm",
		MemoryGB:                80,
		DevicesPerNode:          8,
		Nodes:                   1,
		Interconnect:            market.InterconnectNVLink,
		NetworkID:               "none",
		CPUCores:                96,
		RAMGB:                   1024,
		StorageGB:               7680,
		DriverVersion:           "550.54",
		CUDAVersion:             "12.4",
		OSImage:                 "Ubuntu 22.04",
		ContainerRuntime:        "Docker 26",
		RegionID:                "us-west-or",
		PowerNote:               "Hydro",
		AvailableFrom:           t0,
		AvailableUntil:          t0.Add(90 * 24 * time.Hour),
		MinRentalHours:          1,
		MaxRentalHours:          720,
		ProvisioningMins:        15,
		PriceCentsPerDeviceHour: 249,
		StorageCentsPerGBMonth:  8,
		EgressCentsPerGB:        5,
		BillingBasis:            market.BillingWallClock,
		UptimeBP:                9950,
		CreditSchedule:          []market.CreditTier{{BelowBP: 9950, CreditBP: 1000}, {BelowBP: 9900, CreditBP: 2500}},
		CreditCapBP:             5000,
		FreeCancelHours:         24,
		CancelFeeBP:             1000,
		Figures: []market.Figure{
			{Kind: market.FigureBF16TFLOPS, Value: 900, Basis: market.FigureEstimated, Method: "matmul 8192², bf16"},
			{Kind: market.FigureMemBandwidth, Value: 3000, Basis: market.FigureGuaranteed},
		},
	}
}

func mustValidate(t *testing.T, o *market.Offer) {
	t.Helper()
	if err := market.ValidateOffer(o, t0); err != nil {
		t.Fatalf("test offer invalid: %v", err)
	}
}

func TestCreateAndFindOffer(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	p := createUser(t, db, "prov@example.com", true)
	in := validOffer(p.ID)
	mustValidate(t, &in)
	in.Review, in.State = market.ReviewApproved, market.OfferPaused // not the provider's to set

	got, err := db.CreateOffer(ctx, in, t0)
	if err != nil {
		t.Fatal(err)
	}
	want := in
	want.ID, want.Review, want.State, want.CreatedAt, want.UpdatedAt = got.ID, market.ReviewPending, market.OfferActive, t0, t0
	if got.ID == 0 || !reflect.DeepEqual(got, want) {
		t.Fatalf("CreateOffer =\n%+v\nwant\n%+v", got, want)
	}

	l, err := db.FindOfferByID(ctx, got.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(l.Offer, want) || l.ProviderName != p.DisplayName || l.ProviderOrg != p.Organisation {
		t.Errorf("FindOfferByID = %+v", l)
	}
	own, err := db.FindProviderOffer(ctx, p.ID, got.ID)
	if err != nil || !reflect.DeepEqual(own, want) {
		t.Errorf("FindProviderOffer = %+v, %v", own, err)
	}
	_, err = db.FindOfferByID(ctx, got.ID+1)
	wantCode(t, err, market.CodeNotFound)

	claim := validOffer(p.ID)
	claim.Figures[0].Basis, claim.Figures[0].VerifiedNote = market.FigureVerified, "trust me"
	_, err = db.CreateOffer(ctx, claim, t0)
	wantCode(t, err, market.CodeInvalid)

	dup := validOffer(p.ID)
	dup.Figures = append(dup.Figures, dup.Figures[0])
	_, err = db.CreateOffer(ctx, dup, t0)
	wantCode(t, err, market.CodeConflict)
	if list, _ := db.ListProviderOffers(ctx, p.ID); len(list) != 1 {
		t.Errorf("refused offers were stored: %d offers", len(list))
	}
}

func TestOfferOwnership(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	alice := createUser(t, db, "alice@example.com", true)
	mallory := createUser(t, db, "mallory@example.com", true)
	o, err := db.CreateOffer(ctx, validOffer(alice.ID), t0)
	if err != nil {
		t.Fatal(err)
	}

	_, err = db.FindProviderOffer(ctx, mallory.ID, o.ID)
	wantCode(t, err, market.CodeNotFound)
	edit := o
	edit.Title = "Hijacked"
	edit.PriceCentsPerDeviceHour = 1
	_, _, err = db.UpdateOffer(ctx, mallory.ID, edit, t0.Add(time.Hour))
	wantCode(t, err, market.CodeNotFound)
	wantCode(t, db.SetOfferState(ctx, mallory.ID, o.ID, market.OfferWithdrawn, t0), market.CodeNotFound)
	if list, err := db.ListProviderOffers(ctx, mallory.ID); err != nil || len(list) != 0 {
		t.Errorf("mallory's offers = %v, %v", list, err)
	}

	after, err := db.FindProviderOffer(ctx, alice.ID, o.ID)
	if err != nil || !reflect.DeepEqual(after, o) {
		t.Errorf("alice's offer changed by another provider:\n%+v\nwant\n%+v (%v)", after, o, err)
	}

	// A missing offer is the same not found.
	missing := o
	missing.ID = o.ID + 100
	_, _, err = db.UpdateOffer(ctx, alice.ID, missing, t0)
	wantCode(t, err, market.CodeNotFound)
}

func TestUpdateOfferResetsReviewAndKeepsVerification(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	p := createUser(t, db, "prov@example.com", true)
	o, err := db.CreateOffer(ctx, validOffer(p.ID), t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.ReviewOffer(ctx, o.ID, market.ReviewRejected, "Price looks wrong", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for _, k := range []market.FigureKind{market.FigureBF16TFLOPS, market.FigureMemBandwidth} {
		if err := db.VerifyOfferFigure(ctx, o.ID, k, "ran the benchmark ourselves", t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	wantCode(t, db.VerifyOfferFigure(ctx, o.ID, market.FigureUptime, "x", t0), market.CodeNotFound)
	rejected, _ := db.FindProviderOffer(ctx, p.ID, o.ID)
	if rejected.Review != market.ReviewRejected || rejected.ReviewNote != "Price looks wrong" {
		t.Fatalf("after review: %s %q", rejected.Review, rejected.ReviewNote)
	}

	// The provider resubmits: same TFLOPS figure (as the form shows it,
	// estimated), a changed bandwidth, and a new price.
	edit := validOffer(p.ID)
	edit.ID = o.ID
	edit.Title = "8× H100 SXM, new price"
	edit.PriceCentsPerDeviceHour = 229
	edit.Figures = []market.Figure{
		{Kind: market.FigureBF16TFLOPS, Value: 900, Basis: market.FigureEstimated, Method: "matmul 8192², bf16"},
		{Kind: market.FigureMemBandwidth, Value: 3100, Basis: market.FigureGuaranteed},
	}
	edit.CreditSchedule = []market.CreditTier{{BelowBP: 9900, CreditBP: 1500}}
	mustValidate(t, &edit)
	later := t0.Add(2 * time.Hour)
	got, _, err := db.UpdateOffer(ctx, p.ID, edit, later)
	if err != nil {
		t.Fatal(err)
	}
	wantFigures := []market.Figure{
		{Kind: market.FigureBF16TFLOPS, Value: 900, Basis: market.FigureVerified, Method: "matmul 8192², bf16", VerifiedNote: "ran the benchmark ourselves"},
		{Kind: market.FigureMemBandwidth, Value: 3100, Basis: market.FigureGuaranteed},
	}
	if got.Review != market.ReviewPending || got.ReviewNote != "" || got.State != market.OfferActive ||
		got.Title != edit.Title || got.PriceCentsPerDeviceHour != 229 ||
		!got.CreatedAt.Equal(t0) || !got.UpdatedAt.Equal(later) ||
		!reflect.DeepEqual(got.Figures, wantFigures) || !reflect.DeepEqual(got.CreditSchedule, edit.CreditSchedule) {
		t.Errorf("UpdateOffer = %+v", got)
	}
	stored, _ := db.FindProviderOffer(ctx, p.ID, o.ID)
	if !reflect.DeepEqual(stored, got) {
		t.Errorf("stored offer differs from returned:\n%+v\n%+v", stored, got)
	}

	// Claiming verification for a figure that is not verified is refused.
	claim := edit
	claim.Figures = []market.Figure{{Kind: market.FigureMemBandwidth, Value: 3100, Basis: market.FigureVerified, VerifiedNote: "me"}}
	_, _, err = db.UpdateOffer(ctx, p.ID, claim, later)
	wantCode(t, err, market.CodeInvalid)

	// Withdrawn is final.
	if err := db.SetOfferState(ctx, p.ID, o.ID, market.OfferWithdrawn, later); err != nil {
		t.Fatal(err)
	}
	_, _, err = db.UpdateOffer(ctx, p.ID, edit, later)
	wantCode(t, err, market.CodeConflict)
	wantCode(t, db.SetOfferState(ctx, p.ID, o.ID, market.OfferActive, later), market.CodeConflict)
	wantCode(t, db.ReviewOffer(ctx, o.ID, market.ReviewApproved, "", later), market.CodeConflict)
	wantCode(t, db.SetOfferState(ctx, p.ID, o.ID, "deleted", later), market.CodeInvalid)
}

func TestOfferStateAndReviewQueue(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	p := createUser(t, db, "prov@example.com", true)
	var ids []int64
	for i := range 3 {
		o, err := db.CreateOffer(ctx, validOffer(p.ID), t0.Add(time.Duration(i)*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, o.ID)
	}

	queue, err := db.ListOffersForReview(ctx)
	if err != nil || len(queue) != 3 || queue[0].Offer.ID != ids[0] || queue[2].Offer.ID != ids[2] || queue[0].ProviderName != p.DisplayName {
		t.Fatalf("review queue = %+v, %v", queue, err)
	}
	if err := db.ReviewOffer(ctx, ids[0], market.ReviewApproved, "", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := db.SetOfferState(ctx, p.ID, ids[2], market.OfferWithdrawn, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	wantCode(t, db.ReviewOffer(ctx, ids[0]+100, market.ReviewApproved, "", t0), market.CodeNotFound)
	wantCode(t, db.ReviewOffer(ctx, ids[0], "maybe", "", t0), market.CodeInvalid)
	queue, _ = db.ListOffersForReview(ctx)
	if len(queue) != 1 || queue[0].Offer.ID != ids[1] {
		t.Errorf("review queue after approve and withdraw = %+v", queue)
	}

	listed := func() int {
		ls, err := db.ListAllListedOffers(ctx, t0)
		if err != nil {
			t.Fatal(err)
		}
		return len(ls)
	}
	if n := listed(); n != 1 {
		t.Errorf("%d listed, want 1", n)
	}
	if err := db.SetOfferState(ctx, p.ID, ids[0], market.OfferPaused, t0); err != nil {
		t.Fatal(err)
	}
	if n := listed(); n != 0 {
		t.Errorf("%d listed while paused, want 0", n)
	}
	if err := db.SetOfferState(ctx, p.ID, ids[0], market.OfferActive, t0); err != nil {
		t.Fatal(err)
	}
	if n := listed(); n != 1 {
		t.Errorf("%d listed after resume, want 1", n)
	}

	list, err := db.ListProviderOffers(ctx, p.ID)
	if err != nil || len(list) != 3 || list[0].ID != ids[2] || list[2].ID != ids[0] || len(list[0].Figures) != 2 || len(list[0].CreditSchedule) != 2 {
		t.Errorf("ListProviderOffers (newest first) = %+v, %v", list, err)
	}
	if list[2].State != market.OfferActive || list[0].State != market.OfferWithdrawn || list[1].Review != market.ReviewPending {
		t.Errorf("states = %s/%s, %s/%s, %s/%s", list[0].Review, list[0].State, list[1].Review, list[1].State, list[2].Review, list[2].State)
	}
}

func TestFindOffers(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	p := createUser(t, db, "prov@example.com", true)

	type spec struct {
		name         string
		acc          string
		mem          int
		devs, nodes  int
		network      string
		region       string
		price        market.Cents
		interrupt    bool
		until        time.Duration
		review       market.ReviewState
		state        market.OfferState
		createdAfter time.Duration
	}
	specs := []spec{
		{"h100-or", "nvidia-h100-80gb-sxm", 80, 8, 1, "none", "us-west-or", 249, false, 90 * 24 * time.Hour, market.ReviewApproved, market.OfferActive, 0},
		{"h100pcie-de", "nvidia-h100-80gb-pcie", 80, 4, 2, "ethernet-100", "eu-central-de", 199, true, 90 * 24 * time.Hour, market.ReviewApproved, market.OfferActive, time.Minute},
		{"a100-va-ib", "nvidia-a100-80gb-sxm", 80, 8, 4, "infiniband-400", "us-east-va", 149, true, 90 * 24 * time.Hour, market.ReviewApproved, market.OfferActive, 2 * time.Minute},
		{"mi300x-fr", "amd-mi300x-192gb-oam", 192, 8, 1, "none", "eu-west-fr", 299, false, 90 * 24 * time.Hour, market.ReviewApproved, market.OfferActive, 3 * time.Minute},
		{"l4-or", "nvidia-l4-24gb-pcie", 24, 1, 1, "none", "us-west-or", 49, false, 90 * 24 * time.Hour, market.ReviewApproved, market.OfferActive, 4 * time.Minute},
		{"same-price-as-h100pcie", "nvidia-a10-24gb-pcie", 24, 2, 1, "none", "us-west-ca", 199, false, 90 * 24 * time.Hour, market.ReviewApproved, market.OfferActive, 5 * time.Minute},
		// Not listed:
		{"pending", "nvidia-h100-80gb-sxm", 80, 8, 1, "none", "us-west-or", 10, false, 90 * 24 * time.Hour, market.ReviewPending, market.OfferActive, 0},
		{"rejected", "nvidia-h100-80gb-sxm", 80, 8, 1, "none", "us-west-or", 10, false, 90 * 24 * time.Hour, market.ReviewRejected, market.OfferActive, 0},
		{"paused", "nvidia-h100-80gb-sxm", 80, 8, 1, "none", "us-west-or", 10, false, 90 * 24 * time.Hour, market.ReviewApproved, market.OfferPaused, 0},
		{"withdrawn", "nvidia-h100-80gb-sxm", 80, 8, 1, "none", "us-west-or", 10, false, 90 * 24 * time.Hour, market.ReviewApproved, market.OfferWithdrawn, 0},
		{"ended", "nvidia-h100-80gb-sxm", 80, 8, 1, "none", "us-west-or", 10, false, 2 * time.Hour, market.ReviewApproved, market.OfferActive, 0},
	}
	name := map[int64]string{}
	for _, s := range specs {
		o := validOffer(p.ID)
		o.Title = s.name
		o.AcceleratorID, o.MemoryGB, o.DevicesPerNode, o.Nodes = s.acc, s.mem, s.devs, s.nodes
		o.NetworkID, o.RegionID, o.PriceCentsPerDeviceHour = s.network, s.region, s.price
		o.Interconnect = market.InterconnectPCIe
		o.PlacementGroup = false
		o.Interruptible = s.interrupt
		if s.interrupt {
			o.InterruptibleCentsPerDH = s.price / 2
		}
		o.AvailableUntil = t0.Add(s.until)
		mustValidate(t, &o)
		created, err := db.CreateOffer(ctx, o, t0.Add(s.createdAfter))
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if s.review != market.ReviewPending {
			if err := db.ReviewOffer(ctx, created.ID, s.review, "", t0); err != nil {
				t.Fatal(err)
			}
		}
		if s.state != market.OfferActive {
			if err := db.SetOfferState(ctx, p.ID, created.ID, s.state, t0); err != nil {
				t.Fatal(err)
			}
		}
		name[created.ID] = s.name
	}

	now := t0.Add(3 * time.Hour) // "ended" has ended
	yes, no := true, false
	search := func(s market.OfferSearch) OfferFilter { return OfferFilter{OfferSearch: s} }
	query := func(q string) OfferFilter {
		s, err := market.ParseSearch(q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return search(s)
	}
	withSort := func(f OfferFilter, sort string) OfferFilter { f.Sort = sort; return f }
	tests := []struct {
		name  string
		f     OfferFilter
		want  []string
		total int
	}{
		{"all, price ascending", OfferFilter{},
			[]string{"l4-or", "a100-va-ib", "h100pcie-de", "same-price-as-h100pcie", "h100-or", "mi300x-fr"}, 6},
		{"price descending", OfferFilter{Sort: SortPriceDesc},
			[]string{"mi300x-fr", "h100-or", "h100pcie-de", "same-price-as-h100pcie", "a100-va-ib", "l4-or"}, 6},
		{"memory descending", OfferFilter{Sort: SortMemoryDesc},
			[]string{"mi300x-fr", "a100-va-ib", "h100pcie-de", "h100-or", "l4-or", "same-price-as-h100pcie"}, 6},
		{"devices descending", OfferFilter{Sort: SortDevicesDesc},
			[]string{"a100-va-ib", "h100pcie-de", "h100-or", "mi300x-fr", "same-price-as-h100pcie", "l4-or"}, 6},
		{"newest", OfferFilter{Sort: SortNewest},
			[]string{"same-price-as-h100pcie", "l4-or", "mi300x-fr", "a100-va-ib", "h100pcie-de", "h100-or"}, 6},
		{"unknown sort is price ascending", OfferFilter{Sort: "bogus", Limit: 1}, []string{"l4-or"}, 6},
		{"page 2", OfferFilter{Limit: 2, Offset: 2}, []string{"h100pcie-de", "same-price-as-h100pcie"}, 6},
		{"accelerator ids", search(market.OfferSearch{AcceleratorIDs: []string{"nvidia-h100-80gb-sxm", "amd-mi300x-192gb-oam"}}),
			[]string{"h100-or", "mi300x-fr"}, 2},
		{"an empty id list matches nothing", search(market.OfferSearch{AcceleratorIDs: []string{}}), nil, 0},
		{"family", query("family=H100"), []string{"h100pcie-de", "h100-or"}, 2},
		{"family and models intersect", query("family=H100 model in (h100-80gb-sxm, mi300x-192gb-oam)"), []string{"h100-or"}, 1},
		{"min memory", query("memory>=100"), []string{"mi300x-fr"}, 1},
		{"min devices counts all nodes", query("devices>=9"), []string{"a100-va-ib"}, 1},
		{"devices between", query("devices>1 devices<=8"), []string{"h100pcie-de", "same-price-as-h100pcie", "h100-or", "mi300x-fr"}, 4},
		{"region", query("region=us-west-or"), []string{"l4-or", "h100-or"}, 2},
		{"region group", query(`region=Europe`), []string{"h100pcie-de", "mi300x-fr"}, 2},
		{"country", query("country=US"), []string{"l4-or", "a100-va-ib", "same-price-as-h100pcie", "h100-or"}, 4},
		{"country with no offers", query("country=JP"), nil, 0},
		{"max price", query("price<=1.99"), []string{"l4-or", "a100-va-ib", "h100pcie-de", "same-price-as-h100pcie"}, 4},
		{"price between", query("price>1.49 price<2.99"), []string{"h100pcie-de", "same-price-as-h100pcie", "h100-or"}, 3},
		{"interruptible", search(market.OfferSearch{Interruptible: &yes}), []string{"a100-va-ib", "h100pcie-de"}, 2},
		{"not interruptible", search(market.OfferSearch{Interruptible: &no}), []string{"l4-or", "same-price-as-h100pcie", "h100-or", "mi300x-fr"}, 4},
		{"min network", query("network>=200"), []string{"a100-va-ib"}, 1},
		{"single node only", query("network=0"), []string{"l4-or", "same-price-as-h100pcie", "h100-or", "mi300x-fr"}, 4},
		{"combined", withSort(query("country=US memory>=80 price<=3"), SortPriceDesc), []string{"h100-or", "a100-va-ib"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.f.Now = now
			ls, total, err := db.FindOffers(ctx, tt.f)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, l := range ls {
				got = append(got, name[l.Offer.ID])
				if l.ProviderName != p.DisplayName || len(l.Offer.Figures) != 2 || len(l.Offer.CreditSchedule) != 2 {
					t.Errorf("%s: listing incomplete: %+v", name[l.Offer.ID], l)
				}
			}
			if !reflect.DeepEqual(got, tt.want) || total != tt.total {
				t.Errorf("FindOffers = %v (total %d), want %v (total %d)", got, total, tt.want, tt.total)
			}
		})
	}

	all, err := db.ListAllListedOffers(ctx, now)
	if err != nil || len(all) != 6 {
		t.Fatalf("ListAllListedOffers = %d, %v", len(all), err)
	}
	before, _ := db.ListAllListedOffers(ctx, t0)
	if len(before) != 7 {
		t.Errorf("listed before the short window ended = %d, want 7", len(before))
	}
	for i := 1; i < len(all); i++ {
		if all[i-1].Offer.ID >= all[i].Offer.ID {
			t.Errorf("ListAllListedOffers not ordered by id")
		}
	}
}

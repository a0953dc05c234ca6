package market

import (
	"testing"
	"time"
)

// TestEditNeedsReview: what a provider may change in a listed offer at
// once (a lower price, a longer window) and what goes back to review,
// row by row by hand against one listed offer.
func TestEditNeedsReview(t *testing.T) {
	from := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	cur := Offer{ID: 7, ProviderID: 3, Title: "8× H100", AcceleratorID: "nvidia-h100-80gb-sxm", MemoryGB: 80, DevicesPerNode: 8, Nodes: 1,
		RegionID: "us-west", AvailableFrom: from, AvailableUntil: from.Add(90 * 24 * time.Hour),
		PriceCentsPerDeviceHour: 239, Interruptible: true, InterruptibleCentsPerDH: 150, StorageCentsPerGBMonth: 8, EgressCentsPerGB: 5,
		UptimeBP: 9950, Figures: []Figure{{Kind: "nccl_busbw_gbps", Value: 400, Basis: FigureVerified}, {Kind: "tflops_bf16", Value: 900, Basis: FigureGuaranteed}},
		Review: ReviewApproved, State: OfferActive, CreatedAt: from, UpdatedAt: from}
	for _, tc := range []struct {
		name   string
		edit   func(o *Offer)
		review bool
	}{
		{"nothing changed", func(o *Offer) {}, false},
		{"lower on-demand price", func(o *Offer) { o.PriceCentsPerDeviceHour = 219 }, false},
		{"lower interruptible, storage and egress prices", func(o *Offer) {
			o.InterruptibleCentsPerDH, o.StorageCentsPerGBMonth, o.EgressCentsPerGB = 120, 6, 4
		}, false},
		{"earlier start and later end", func(o *Offer) {
			o.AvailableFrom, o.AvailableUntil = from.Add(-time.Hour), from.Add(120*24*time.Hour)
		}, false},
		{"a figure resubmitted unverified with the same value", func(o *Offer) {
			o.Figures = []Figure{{Kind: "tflops_bf16", Value: 900, Basis: FigureGuaranteed}, {Kind: "nccl_busbw_gbps", Value: 400, Basis: FigureEstimated}}
		}, false},
		{"a guaranteed figure made an estimate", func(o *Offer) {
			o.Figures = []Figure{{Kind: "nccl_busbw_gbps", Value: 400, Basis: FigureVerified}, {Kind: "tflops_bf16", Value: 900, Basis: FigureEstimated}}
		}, true},
		{"the times and review of the submitted form", func(o *Offer) {
			o.Review, o.State, o.UpdatedAt, o.ID, o.ProviderID = ReviewPending, OfferPaused, from.Add(time.Hour), 0, 0
		}, false},
		{"higher price", func(o *Offer) { o.PriceCentsPerDeviceHour = 240 }, true},
		{"higher interruptible price", func(o *Offer) { o.InterruptibleCentsPerDH = 151 }, true},
		{"a price cut and a higher egress price", func(o *Offer) { o.PriceCentsPerDeviceHour, o.EgressCentsPerGB = 200, 6 }, true},
		{"later start", func(o *Offer) { o.AvailableFrom = from.Add(time.Hour) }, true},
		{"earlier end", func(o *Offer) { o.AvailableUntil = from.Add(30 * 24 * time.Hour) }, true},
		{"a price cut and more memory", func(o *Offer) { o.PriceCentsPerDeviceHour, o.MemoryGB = 200, 96 }, true},
		{"more nodes", func(o *Offer) { o.Nodes = 2 }, true},
		{"title", func(o *Offer) { o.Title = "8× H100 (fast)" }, true},
		{"region", func(o *Offer) { o.RegionID = "eu-west" }, true},
		{"a figure's value", func(o *Offer) {
			o.Figures = []Figure{{Kind: "nccl_busbw_gbps", Value: 450}, {Kind: "tflops_bf16", Value: 900, Basis: FigureGuaranteed}}
		}, true},
		{"a figure dropped", func(o *Offer) { o.Figures = o.Figures[:1] }, true},
		{"lower uptime guarantee", func(o *Offer) { o.UptimeBP = 9900 }, true},
		{"interruptible no more", func(o *Offer) { o.Interruptible = false }, true},
	} {
		next := cur
		next.Figures = append([]Figure(nil), cur.Figures...)
		tc.edit(&next)
		if got := EditNeedsReview(cur, next); got != tc.review {
			t.Errorf("%s: needs review %v, want %v", tc.name, got, tc.review)
		}
	}
}

package market

import (
	"reflect"
	"testing"
)

func moderationOffer() Offer {
	return Offer{
		AcceleratorID: "nvidia-h100-80gb-sxm", MemoryGB: 80, DevicesPerNode: 8, Nodes: 1,
		PriceCentsPerDeviceHour: 250,
	}
}

func TestRedFlags(t *testing.T) {
	market5 := []Cents{200, 240, 250, 260, 300} // median 250
	delivered := ProviderRecord{MaxDeliveredDevices: 8, DeliveredReservations: 6, ApprovedOffers: 3}
	tests := []struct {
		name  string
		edit  func(*Offer)
		in    ModerationInput
		codes []RedFlagCode
	}{
		{name: "clean offer, clean market", in: ModerationInput{Record: delivered, MarketPrices: market5}},
		{name: "BF16 at the published peak is fine", edit: func(o *Offer) {
			o.Figures = []Figure{{Kind: FigureBF16TFLOPS, Value: 989}}
		}, in: ModerationInput{Record: delivered}},
		{name: "BF16 above the published peak", edit: func(o *Offer) {
			o.Figures = []Figure{{Kind: FigureBF16TFLOPS, Value: 990}}
		}, in: ModerationInput{Record: delivered}, codes: []RedFlagCode{FlagFigureAboveCatalogue}},
		{name: "memory bandwidth above published", edit: func(o *Offer) {
			o.Figures = []Figure{{Kind: FigureMemBandwidth, Value: 4000}}
		}, in: ModerationInput{Record: delivered}, codes: []RedFlagCode{FlagFigureAboveCatalogue}},
		{name: "both figures above published", edit: func(o *Offer) {
			o.Figures = []Figure{{Kind: FigureBF16TFLOPS, Value: 2000}, {Kind: FigureMemBandwidth, Value: 3351}}
		}, in: ModerationInput{Record: delivered}, codes: []RedFlagCode{FlagFigureAboveCatalogue, FlagFigureAboveCatalogue}},
		{name: "relative throughput within tolerance", edit: func(o *Offer) {
			o.Figures = []Figure{{Kind: FigureRelThroughput, Value: 3487}} // published 3170, +10 % = 3487
		}, in: ModerationInput{Record: delivered}},
		{name: "relative throughput beyond tolerance", edit: func(o *Offer) {
			o.Figures = []Figure{{Kind: FigureRelThroughput, Value: 3488}}
		}, in: ModerationInput{Record: delivered}, codes: []RedFlagCode{FlagFigureAboveCatalogue}},
		{name: "price exactly half the median is fine", edit: func(o *Offer) { o.PriceCentsPerDeviceHour = 125 },
			in: ModerationInput{Record: delivered, MarketPrices: market5}},
		{name: "price below half the median", edit: func(o *Offer) { o.PriceCentsPerDeviceHour = 124 },
			in: ModerationInput{Record: delivered, MarketPrices: market5}, codes: []RedFlagCode{FlagPriceLow}},
		{name: "price exactly twice the median is fine", edit: func(o *Offer) { o.PriceCentsPerDeviceHour = 500 },
			in: ModerationInput{Record: delivered, MarketPrices: market5}},
		{name: "price above twice the median", edit: func(o *Offer) { o.PriceCentsPerDeviceHour = 501 },
			in: ModerationInput{Record: delivered, MarketPrices: market5}, codes: []RedFlagCode{FlagPriceHigh}},
		{name: "too few comparables: no price flag", edit: func(o *Offer) { o.PriceCentsPerDeviceHour = 5 },
			in: ModerationInput{Record: delivered, MarketPrices: []Cents{250, 250}}},
		{name: "new provider within the allowance", edit: func(o *Offer) { o.DevicesPerNode, o.Nodes = 8, 2 }},
		{name: "new provider above the allowance", edit: func(o *Offer) { o.DevicesPerNode, o.Nodes = 8, 3 },
			codes: []RedFlagCode{FlagCapacityAboveHistory}},
		{name: "four times what was delivered is fine", edit: func(o *Offer) { o.DevicesPerNode, o.Nodes = 8, 4 },
			in: ModerationInput{Record: delivered}},
		{name: "above four times what was delivered", edit: func(o *Offer) { o.DevicesPerNode, o.Nodes = 8, 5 },
			in: ModerationInput{Record: delivered}, codes: []RedFlagCode{FlagCapacityAboveHistory}},
		{name: "two incidents are not many", in: ModerationInput{Record: ProviderRecord{MaxDeliveredDevices: 8, RecentIncidents: 2}}},
		{name: "three incidents are many", in: ModerationInput{Record: ProviderRecord{MaxDeliveredDevices: 8, RecentIncidents: 3}},
			codes: []RedFlagCode{FlagManyIncidents}},
		{name: "an upheld dispute", in: ModerationInput{Record: ProviderRecord{MaxDeliveredDevices: 8, UpheldDisputes: 1}},
			codes: []RedFlagCode{FlagUpheldDisputes}},
		{name: "everything at once, in order", edit: func(o *Offer) {
			o.Figures = []Figure{{Kind: FigureBF16TFLOPS, Value: 1200}}
			o.PriceCentsPerDeviceHour = 50
			o.Nodes = 10
		}, in: ModerationInput{Record: ProviderRecord{RecentIncidents: 4, UpheldDisputes: 2}, MarketPrices: market5},
			codes: []RedFlagCode{FlagFigureAboveCatalogue, FlagPriceLow, FlagCapacityAboveHistory, FlagManyIncidents, FlagUpheldDisputes}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := moderationOffer()
			if tt.edit != nil {
				tt.edit(&o)
			}
			flags := RedFlags(o, tt.in)
			var codes []RedFlagCode
			for _, f := range flags {
				codes = append(codes, f.Code)
				if f.Message == "" {
					t.Errorf("flag %s has no message", f.Code)
				}
			}
			if !reflect.DeepEqual(codes, tt.codes) {
				t.Errorf("codes = %v, want %v (%v)", codes, tt.codes, flags)
			}
		})
	}
}

func TestCleanTrackRecordAndAutoApprove(t *testing.T) {
	clean := ProviderRecord{ApprovedOffers: 3, DeliveredReservations: 5}
	tests := []struct {
		name  string
		r     ProviderRecord
		flags []RedFlag
		clean bool
		auto  bool
	}{
		{name: "exactly the thresholds", r: clean, clean: true, auto: true},
		{name: "clean but flagged listing", r: clean, flags: []RedFlag{{Code: FlagPriceLow}}, clean: true, auto: false},
		{name: "too few approved offers", r: ProviderRecord{ApprovedOffers: 2, DeliveredReservations: 9}},
		{name: "too few deliveries", r: ProviderRecord{ApprovedOffers: 9, DeliveredReservations: 4}},
		{name: "an upheld dispute", r: ProviderRecord{ApprovedOffers: 9, DeliveredReservations: 9, UpheldDisputes: 1}},
		{name: "a recent incident", r: ProviderRecord{ApprovedOffers: 9, DeliveredReservations: 9, RecentIncidents: 1}},
		{name: "suspended", r: ProviderRecord{ApprovedOffers: 9, DeliveredReservations: 9, Suspended: true}},
		{name: "new provider", r: ProviderRecord{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.r.CleanTrackRecord(); got != tt.clean {
				t.Errorf("CleanTrackRecord = %v, want %v", got, tt.clean)
			}
			if got := AutoApprove(tt.r, tt.flags); got != tt.auto {
				t.Errorf("AutoApprove = %v, want %v", got, tt.auto)
			}
		})
	}
}

func TestMedianCents(t *testing.T) {
	tests := []struct {
		in   []Cents
		want Cents
	}{
		{nil, 0},
		{[]Cents{7}, 7},
		{[]Cents{300, 100, 200}, 200},
		{[]Cents{100, 201}, 151}, // 150.5 rounds half up
		{[]Cents{400, 100, 300, 200}, 250},
	}
	for _, tt := range tests {
		in := append([]Cents(nil), tt.in...)
		if got := MedianCents(tt.in); got != tt.want {
			t.Errorf("MedianCents(%v) = %d, want %d", tt.in, got, tt.want)
		}
		if !reflect.DeepEqual(in, tt.in) {
			t.Errorf("MedianCents changed its input: %v", tt.in)
		}
	}
}

// TestNVLinkOnAModelWithoutIt: an RTX 4090 or L40S box that says NVLink is
// flagged; PCIe on it, and NVLink on an H100 SXM or an A100 PCIe (bridged),
// are not.
func TestNVLinkOnAModelWithoutIt(t *testing.T) {
	for _, tc := range []struct {
		acc  string
		ic   Interconnect
		flag bool
	}{
		{"nvidia-rtx4090-24gb-pcie", InterconnectNVLink, true},
		{"nvidia-l40s-48gb-pcie", InterconnectNVLink, true},
		{"nvidia-rtx4090-24gb-pcie", InterconnectPCIe, false},
		{"nvidia-h100-80gb-sxm", InterconnectNVLink, false},
		{"nvidia-a100-40gb-pcie", InterconnectNVLink, false},
	} {
		o := Offer{AcceleratorID: tc.acc, Interconnect: tc.ic, DevicesPerNode: 4, Nodes: 1}
		got := false
		for _, f := range RedFlags(o, ModerationInput{}) {
			if f.Code == FlagNoNVLink {
				got = true
			}
		}
		if got != tc.flag {
			t.Errorf("%s with %s: flagged %v, want %v", tc.acc, tc.ic, got, tc.flag)
		}
	}
}

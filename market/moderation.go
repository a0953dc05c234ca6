package market

import (
	"fmt"
	"sort"
	"time"
)

// ProviderRecord is what the platform knows of a provider's history, for
// moderation and for the reliability score. Counts are as of one instant;
// the trailing window is ReliabilityWindow.
type ProviderRecord struct {
	ProviderID int64
	// ApprovedOffers counts the provider's offers an admin has approved
	// (now approved, whatever their state).
	ApprovedOffers int
	// DeliveredReservations counts reservations with a piece of the
	// provider's that ran to the end (completed or settled).
	DeliveredReservations int
	// UpheldDisputes counts disputes on the provider's reservations that an
	// admin decided for the buyer (a credit granted).
	UpheldDisputes int
	// MaxDeliveredDevices is the most devices the provider delivered in
	// one completed piece.
	MaxDeliveredDevices int
	// RecentIncidents counts incidents on the provider's pieces that
	// started in the trailing window.
	RecentIncidents int
	// PromisedDeviceSeconds is the device-time of the provider's completed
	// pieces that ended in the trailing window; LostDeviceSeconds the part
	// of it lost to acknowledged outages (host failure, power curtailment,
	// fewer devices).
	PromisedDeviceSeconds int64
	LostDeviceSeconds     int64
	// MeasuredDeviceSeconds is the part of PromisedDeviceSeconds on
	// pieces the provider's agents measured (AgentMeasured);
	// MeasuredLostDeviceSeconds the device-time of those pieces that their
	// heartbeats showed lost to outages; ReportedLostOnMeasured the part
	// of LostDeviceSeconds reported on those pieces by the agent or the
	// provider, which the measurement replaces (ScoredLostDeviceSeconds).
	// A buyer's acknowledged report keeps counting: the agent is the
	// provider's word (issue 23).
	MeasuredDeviceSeconds     int64
	MeasuredLostDeviceSeconds int64
	ReportedLostOnMeasured    int64
	Suspended                 bool
}

// Thresholds of a clean track record: a provider with at least
// CleanApprovedOffers approved offers and CleanDeliveredReservations
// delivered reservations, no upheld dispute, no incident in the trailing
// window and not suspended is trusted to list without waiting for review —
// unless the listing itself raises a red flag.
const (
	CleanApprovedOffers        = 3
	CleanDeliveredReservations = 5
)

// CleanTrackRecord reports whether the provider's new and edited offers
// may be approved automatically (when they raise no red flag).
func (r ProviderRecord) CleanTrackRecord() bool {
	return !r.Suspended && r.ApprovedOffers >= CleanApprovedOffers &&
		r.DeliveredReservations >= CleanDeliveredReservations &&
		r.UpheldDisputes == 0 && r.RecentIncidents == 0
}

// AutoApprove reports whether an offer may skip the review queue: the
// provider has a clean track record and the offer raises no red flag.
func AutoApprove(r ProviderRecord, flags []RedFlag) bool {
	return r.CleanTrackRecord() && len(flags) == 0
}

// RedFlagCode names one kind of automatic warning on a listing.
type RedFlagCode string

// Red flag codes.
const (
	FlagFigureAboveCatalogue RedFlagCode = "figure_above_catalogue"
	FlagPriceLow             RedFlagCode = "price_low"
	FlagPriceHigh            RedFlagCode = "price_high"
	FlagCapacityAboveHistory RedFlagCode = "capacity_above_history"
	FlagManyIncidents        RedFlagCode = "many_incidents"
	FlagUpheldDisputes       RedFlagCode = "upheld_disputes"
	// FlagHardwareDiffers: a node's agent reports devices other than the
	// listing's (model, count per node, memory); kept until a heartbeat
	// matches.
	FlagHardwareDiffers RedFlagCode = "hardware_differs"
	// FlagNoNVLink: the offer says NVLink on a model that has none.
	FlagNoNVLink RedFlagCode = "no_nvlink"
)

// Label names the flag in words, for the admin's review page.
func (c RedFlagCode) Label() string {
	switch c {
	case FlagFigureAboveCatalogue:
		return "Figure above the catalogue"
	case FlagPriceLow:
		return "Price far below the market"
	case FlagPriceHigh:
		return "Price far above the market"
	case FlagCapacityAboveHistory:
		return "More capacity than delivered before"
	case FlagManyIncidents:
		return "Many incidents"
	case FlagUpheldDisputes:
		return "Disputes upheld"
	case FlagHardwareDiffers:
		return "Hardware differs from listing"
	case FlagNoNVLink:
		return "NVLink on a model without it"
	}
	return "Warning"
}

// RedFlag is one automatic warning shown to the admin reviewing a listing.
type RedFlag struct {
	Code    RedFlagCode
	Message string // for the admin: what is off, with the numbers
}

// FigureAbove is a performance figure an offer states above what the
// catalogue publishes for its model (see RedFlags for the rule). Values
// are in the kind's stored unit.
type FigureAbove struct {
	Kind      FigureKind
	Stated    int64
	Published int64
	Model     string // the accelerator's name
}

// PublishedFigure is the catalogue's published figure of kind for the
// accelerator, in the kind's stored unit: the vendor's BF16 peak, memory
// bandwidth, or the throughput relative to the reference. Other kinds
// have none.
func PublishedFigure(acceleratorID string, k FigureKind) (int64, bool) {
	acc, ok := FindAccelerator(acceleratorID)
	if !ok {
		return 0, false
	}
	switch k {
	case FigureBF16TFLOPS:
		return int64(acc.BF16TFLOPS), true
	case FigureMemBandwidth:
		return int64(acc.MemBWGBs), true
	case FigureRelThroughput:
		return acc.RelativeThroughputPermille(), true
	}
	return 0, false
}

// FiguresAboveCatalogue returns the offer's figures above the catalogue's
// published figures for its model, in FigureKinds order: a BF16 TFLOPS or
// memory bandwidth figure above the vendor's figure, or a relative
// throughput more than FigureToleranceBP above the published ratio.
func FiguresAboveCatalogue(o Offer) []FigureAbove {
	acc, ok := FindAccelerator(o.AcceleratorID)
	if !ok {
		return nil
	}
	var out []FigureAbove
	if f, ok := o.Figure(FigureBF16TFLOPS); ok && f.Value > int64(acc.BF16TFLOPS) {
		out = append(out, FigureAbove{Kind: FigureBF16TFLOPS, Stated: f.Value, Published: int64(acc.BF16TFLOPS), Model: acc.Name})
	}
	if f, ok := o.Figure(FigureMemBandwidth); ok && f.Value > int64(acc.MemBWGBs) {
		out = append(out, FigureAbove{Kind: FigureMemBandwidth, Stated: f.Value, Published: int64(acc.MemBWGBs), Model: acc.Name})
	}
	if f, ok := o.Figure(FigureRelThroughput); ok {
		published := acc.RelativeThroughputPermille()
		if f.Value*10000 > published*(10000+FigureToleranceBP) {
			out = append(out, FigureAbove{Kind: FigureRelThroughput, Stated: f.Value, Published: published, Model: acc.Name})
		}
	}
	return out
}

// AdminMessage is the red flag's message for the reviewing admin.
func (f FigureAbove) AdminMessage() string {
	switch f.Kind {
	case FigureBF16TFLOPS:
		return fmt.Sprintf("States %s TFLOPS BF16 per device; the %s's published peak is %s.", FormatInt(f.Stated), f.Model, FormatInt(f.Published))
	case FigureMemBandwidth:
		return fmt.Sprintf("States %s GB/s memory bandwidth per device; the %s's published figure is %s.", FormatInt(f.Stated), f.Model, FormatInt(f.Published))
	}
	return fmt.Sprintf("States training throughput of %s; published figures give %s%% (more than %s%% above).",
		FormatFigure(f.Kind, f.Stated), FormatFigureValue(f.Kind, f.Published), FormatPercentBP(FigureToleranceBP))
}

// ProviderMessage warns the provider on the offer form, before they
// submit, with the reason.
func (f FigureAbove) ProviderMessage() string {
	switch f.Kind {
	case FigureBF16TFLOPS:
		return fmt.Sprintf("%s TFLOPS is above the %s's published peak of %s TFLOPS per device. A measurement cannot beat the vendor's peak: is it per node, or at another precision (FP8, sparsity)? Submitted as it is, the listing is flagged for the reviewer.",
			FormatInt(f.Stated), f.Model, FormatInt(f.Published))
	case FigureMemBandwidth:
		return fmt.Sprintf("%s GB/s is above the %s's published memory bandwidth of %s GB/s per device. A measurement cannot beat the vendor's figure: is it per node? Submitted as it is, the listing is flagged for the reviewer.",
			FormatInt(f.Stated), f.Model, FormatInt(f.Published))
	}
	return fmt.Sprintf("%s%% is more than %s%% above the %s's published speed of %s (from the vendors' BF16 figures). Is it another precision (FP8, sparsity)? Submitted as it is, the listing is flagged for the reviewer.",
		FormatFigureValue(f.Kind, f.Stated), FormatPercentBP(FigureToleranceBP), f.Model, FormatFigure(f.Kind, f.Published))
}

// Red-flag thresholds, documented here because admins read them on the
// review page:
//
//   - Figures: a BF16 TFLOPS or memory bandwidth figure above the
//     catalogue's published (vendor peak) figure for the model, or a
//     relative throughput more than FigureToleranceBP above the published
//     ratio to the reference part. Stated figures are measurements; a
//     measurement above the vendor's peak is a typo or a claim to check.
//   - Price: the on-demand price below PriceLowPermille or above
//     PriceHighPermille of the median of the other listed offers of the same
//     model — only when there are at least MinPriceComparables of them, so
//     one odd listing does not make a market.
//   - Capacity: more devices than NewProviderDevices for a provider with no
//     delivery, else more than CapacityMultiple times the most devices the
//     provider has delivered in one booking.
//   - Incidents: ManyIncidents or more incidents in the trailing window.
//   - Disputes: any dispute upheld against the provider.
const (
	FigureToleranceBP   = 1000 // 10 %
	PriceLowPermille    = 500  // 0.5 × median
	PriceHighPermille   = 2000 // 2 × median
	MinPriceComparables = 3
	NewProviderDevices  = 16
	CapacityMultiple    = 4
	ManyIncidents       = 3
)

// ModerationInput is what RedFlags looks at besides the offer itself.
type ModerationInput struct {
	Record ProviderRecord
	// MarketPrices are the on-demand prices per device-hour of the other
	// listed offers of the same accelerator model.
	MarketPrices []Cents
	// HardwareDiffers holds, per node whose agent reports devices other than
	// the listing's, the admins' message (HardwareDiffersMessage).
	HardwareDiffers []string
}

// RedFlags returns the automatic warnings on an offer, in a fixed order
// (figures, price, capacity, incidents, disputes, hardware). It is pure: the caller
// gathers the provider's record, the market's prices and what the agents
// report.
func RedFlags(o Offer, in ModerationInput) []RedFlag {
	var flags []RedFlag
	add := func(code RedFlagCode, format string, args ...any) {
		flags = append(flags, RedFlag{Code: code, Message: fmt.Sprintf(format, args...)})
	}
	for _, f := range FiguresAboveCatalogue(o) {
		flags = append(flags, RedFlag{Code: FlagFigureAboveCatalogue, Message: f.AdminMessage()})
	}
	if len(in.MarketPrices) >= MinPriceComparables {
		med := MedianCents(in.MarketPrices)
		p := int64(o.PriceCentsPerDeviceHour)
		switch {
		case p*1000 < int64(med)*PriceLowPermille:
			add(FlagPriceLow, "Price %s per device-hour is below half the median %s of %d other listed offers of this model.", o.PriceCentsPerDeviceHour, med, len(in.MarketPrices))
		case p*1000 > int64(med)*PriceHighPermille:
			add(FlagPriceHigh, "Price %s per device-hour is above twice the median %s of %d other listed offers of this model.", o.PriceCentsPerDeviceHour, med, len(in.MarketPrices))
		}
	}
	limit := NewProviderDevices
	if in.Record.MaxDeliveredDevices > 0 {
		limit = max(in.Record.MaxDeliveredDevices*CapacityMultiple, in.Record.MaxDeliveredDevices)
	}
	if o.Devices() > limit {
		if in.Record.MaxDeliveredDevices == 0 {
			add(FlagCapacityAboveHistory, "Lists %d devices; the provider has delivered no booking yet (new providers: up to %d without a flag).", o.Devices(), NewProviderDevices)
		} else {
			add(FlagCapacityAboveHistory, "Lists %d devices; the most the provider has delivered in one booking is %d.", o.Devices(), in.Record.MaxDeliveredDevices)
		}
	}
	if in.Record.RecentIncidents >= ManyIncidents {
		add(FlagManyIncidents, "%d incidents on the provider's bookings in the last %d days.", in.Record.RecentIncidents, int(ReliabilityWindow/(24*time.Hour)))
	}
	if in.Record.UpheldDisputes > 0 {
		add(FlagUpheldDisputes, "%d dispute(s) decided against the provider.", in.Record.UpheldDisputes)
	}
	for _, m := range in.HardwareDiffers {
		flags = append(flags, RedFlag{Code: FlagHardwareDiffers, Message: m})
	}
	if acc, ok := FindAccelerator(o.AcceleratorID); ok && o.Interconnect == InterconnectNVLink && !acc.NVLink() {
		add(FlagNoNVLink, "Says NVLink between its devices, but the %s has no NVLink (PCIe only).", acc.Name)
	}
	return flags
}

// MedianCents returns the median of amounts (the mean of the middle two,
// rounded half up, for an even count); zero for none. amounts is not changed.
func MedianCents(amounts []Cents) Cents {
	if len(amounts) == 0 {
		return 0
	}
	s := append([]Cents(nil), amounts...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return Cents(MulDivRound(int64(s[n/2-1])+int64(s[n/2]), 1, 2))
}

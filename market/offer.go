package market

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ReviewState is where an offer stands in moderation.
type ReviewState string

// Review states. New and edited offers start pending.
const (
	ReviewPending  ReviewState = "pending"
	ReviewApproved ReviewState = "approved"
	ReviewRejected ReviewState = "rejected"
	// ReviewChangesRequested: the admin asks the provider to change the
	// offer and resubmit; like rejected it is not listed, but the reason
	// reads as a request rather than a refusal.
	ReviewChangesRequested ReviewState = "changes_requested"
)

// OfferState is the provider's own switch on an offer.
type OfferState string

// Offer states. Withdrawn is final.
const (
	OfferActive    OfferState = "active"
	OfferPaused    OfferState = "paused"
	OfferWithdrawn OfferState = "withdrawn"
)

// EditNeedsReview reports whether a provider's edit of a listed offer
// (cur → next) must be reviewed before it is listed. Changes that cannot
// mislead a buyer apply at once: a lower price (on demand, interruptible,
// storage, egress) and a longer availability window (an earlier start, a
// later end). Any other change — hardware, software, region, figures,
// terms, the title — is a claim to check. A figure resubmitted with the
// same value and basis is the same figure, and so is a verified one
// resubmitted with its value (its verification is kept).
func EditNeedsReview(cur, next Offer) bool {
	if next.PriceCentsPerDeviceHour > cur.PriceCentsPerDeviceHour || next.InterruptibleCentsPerDH > cur.InterruptibleCentsPerDH ||
		next.StorageCentsPerGBMonth > cur.StorageCentsPerGBMonth || next.EgressCentsPerGB > cur.EgressCentsPerGB ||
		next.AvailableFrom.After(cur.AvailableFrom) || next.AvailableUntil.Before(cur.AvailableUntil) {
		return true
	}
	a, b := comparableOffer(cur, cur), comparableOffer(next, cur)
	return !reflect.DeepEqual(a, b)
}

// comparableOffer is o with what EditNeedsReview lets change at once, and
// what the provider does not edit, set to cur's, and its lists in one
// order, so two offers that differ only there are equal.
func comparableOffer(o, cur Offer) Offer {
	o.ID, o.ProviderID, o.Review, o.ReviewNote, o.State, o.CreatedAt, o.UpdatedAt = 0, 0, "", "", "", time.Time{}, time.Time{}
	o.PriceCentsPerDeviceHour, o.InterruptibleCentsPerDH = 0, 0
	o.StorageCentsPerGBMonth, o.EgressCentsPerGB = 0, 0
	o.AvailableFrom, o.AvailableUntil = time.Time{}, time.Time{}
	figs := make([]Figure, 0, len(o.Figures))
	for _, f := range o.Figures {
		for _, c := range cur.Figures {
			if c.Kind == f.Kind && c.Value == f.Value && (c.Basis == f.Basis || c.Basis == FigureVerified) {
				f = c
			}
		}
		figs = append(figs, f)
	}
	sort.Slice(figs, func(i, j int) bool { return figs[i].Kind < figs[j].Kind })
	o.Figures = figs
	if len(o.CreditSchedule) == 0 {
		o.CreditSchedule = nil
	}
	return o
}

// ChangeOfferState checks that a provider may switch an offer in state cur
// to next: only to active, paused or withdrawn, and never out of
// withdrawn (withdrawal is final).
func ChangeOfferState(cur, next OfferState) error {
	switch next {
	case OfferActive, OfferPaused, OfferWithdrawn:
	default:
		return &Error{Code: CodeInvalid, Message: "Choose pause, resume or withdraw.",
			Fields: map[string]string{"state": "one of active, paused, withdrawn"}}
	}
	if cur == OfferWithdrawn {
		return Errorf(CodeConflict, "This offer has been withdrawn; withdrawal is final.")
	}
	return nil
}

// BillingBasis says what the buyer pays for.
type BillingBasis string

// Billing bases.
const (
	BillingWallClock      BillingBasis = "wall_clock"      // pay for the reserved block
	BillingCommittedBlock BillingBasis = "committed_block" // discounted, pay regardless of use except SLA breaches
	BillingSuccessfulWork BillingBasis = "successful_work" // pay only for delivered device-hours
)

// Label is the display name of the basis.
func (b BillingBasis) Label() string {
	switch b {
	case BillingWallClock:
		return "Wall-clock (pay for the reserved block)"
	case BillingCommittedBlock:
		return "Committed block (pay regardless of use, except SLA breaches)"
	case BillingSuccessfulWork:
		return "Successful work (pay only for delivered device-hours)"
	}
	return string(b)
}

// FigureBasis says how much a performance figure can be trusted.
type FigureBasis string

// Figure bases. Verified is settable only by an admin.
const (
	FigureGuaranteed FigureBasis = "guaranteed" // contractual; breaches are SLA incidents
	FigureEstimated  FigureBasis = "estimated"  // the provider's own benchmark, with its method
	FigureVerified   FigureBasis = "verified"   // checked by the platform
)

// FigureKind names a performance figure an offer may state.
type FigureKind string

// Figure kinds, with the unit each is stated in.
const (
	FigureBF16TFLOPS    FigureKind = "bf16_tflops"     // per device, TFLOPS
	FigureMemBandwidth  FigureKind = "mem_bandwidth"   // per device, GB/s
	FigureAllReduce     FigureKind = "allreduce_busbw" // NCCL/RCCL all-reduce bus bandwidth across the offer, GB/s
	FigureRelThroughput FigureKind = "rel_throughput"  // training throughput vs the reference accelerator, permille
	FigureTokensPerSec  FigureKind = "tokens_per_sec"  // inference tokens/s per device on the stated method
	FigureUptime        FigureKind = "uptime_bp"       // measured uptime, basis points
)

// FigureKinds lists the kinds with their units, for forms.
var FigureKinds = []struct {
	Kind  FigureKind
	Label string
	Unit  string
}{
	{FigureBF16TFLOPS, "BF16 throughput per device", "TFLOPS"},
	{FigureMemBandwidth, "Memory bandwidth per device", "GB/s"},
	{FigureAllReduce, "All-reduce bus bandwidth", "GB/s"},
	{FigureRelThroughput, "Training throughput vs A100 80GB SXM", "‰"},
	{FigureTokensPerSec, "Inference tokens per second per device", "tok/s"},
}

// FigureFormUnit is the unit a person types and reads a figure in. Every
// kind is stored in its FigureKinds unit; relative throughput, stored in
// thousandths of the reference, is written as a percentage of it (100 %
// = as fast as an A100 80GB SXM), which is how providers say it.
func FigureFormUnit(k FigureKind) string {
	if k == FigureRelThroughput {
		return "%; 100 = as fast"
	}
	for _, fk := range FigureKinds {
		if fk.Kind == k {
			return fk.Unit
		}
	}
	return ""
}

// FormatFigureValue writes a stored figure's number the way the form
// takes it: relative throughput as a percentage with at most one decimal
// (3170 → "317", 1055 → "105.5"), other kinds as the whole number.
func FormatFigureValue(k FigureKind, v int64) string {
	if k != FigureRelThroughput {
		return strconv.FormatInt(v, 10)
	}
	if v%10 == 0 {
		return strconv.FormatInt(v/10, 10)
	}
	return strconv.FormatInt(v/10, 10) + "." + strconv.FormatInt(v%10, 10)
}

// ParseFigureValue reads a figure's number as typed on the form (see
// FormatFigureValue) into its stored unit.
func ParseFigureValue(k FigureKind, s string) (int64, error) {
	s = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "%"))
	if k != FigureRelThroughput {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("enter a whole number")
		}
		return n, nil
	}
	whole, frac, hasFrac := strings.Cut(s, ".")
	n, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || n < 0 || n > 1_000_000 || (hasFrac && (len(frac) != 1 || frac[0] < '0' || frac[0] > '9')) {
		return 0, fmt.Errorf("enter a percentage with at most one decimal, e.g. 317 or 105.5")
	}
	n *= 10
	if hasFrac {
		n += int64(frac[0] - '0')
	}
	return n, nil
}

// FormatFigure writes a figure for people: "989 TFLOPS", "3,350 GB/s",
// "317% of an A100 80GB SXM".
func FormatFigure(k FigureKind, v int64) string {
	if k == FigureRelThroughput {
		return FormatFigureValue(k, v) + "% of an A100 80GB SXM"
	}
	return FormatInt(v) + " " + FigureFormUnit(k)
}

// Figure is one performance figure on an offer.
type Figure struct {
	Kind   FigureKind
	Value  int64
	Basis  FigureBasis
	Method string // how it was measured (required for estimated)
	// VerifiedNote is the admin's evidence note, set with Basis verified.
	VerifiedNote string
}

// CreditTier is one step of an SLA credit schedule: when measured uptime
// falls below BelowBP basis points, the buyer is credited CreditBP of the
// amount paid.
type CreditTier struct {
	BelowBP  int `json:"below_bp"`  // e.g. 9950 = 99.50 %
	CreditBP int `json:"credit_bp"` // e.g. 1000 = 10 %
}

// Offer is a provider's contract for accelerator capacity. Prices are in
// cents; durations in whole hours or minutes as named; times are UTC.
type Offer struct {
	ID         int64
	ProviderID int64
	Title      string

	// Hardware and topology.
	AcceleratorID  string
	MemoryGB       int // stated memory per device; must equal the catalogue
	DevicesPerNode int
	Nodes          int
	Interconnect   Interconnect
	NetworkID      string
	PlacementGroup bool // all devices share one fabric: gang jobs may span nodes
	CPUCores       int  // per node
	RAMGB          int  // per node
	StorageGB      int  // local storage per node

	// Software stack.
	DriverVersion    string // e.g. "550.54"
	CUDAVersion      string // CUDA or ROCm version, e.g. "12.4" / "6.1"
	OSImage          string
	ContainerRuntime string
	// Containers is whether and how the host runs buyers' environments
	// (runtime.go).
	Containers ContainerSupport
	// Access is whether the hosts run the provider agent (access.go);
	// AccessInstructions, for an offer without it, how the provider gives
	// access, shown to the buyer after payment.
	Access             AccessMode
	AccessInstructions string

	// Location and power.
	RegionID      string
	CarbonGPerKWh int // stated by the provider, or the region default
	PowerNote     string

	// Availability.
	AvailableFrom     time.Time
	AvailableUntil    time.Time
	MinRentalHours    int
	MaxRentalHours    int
	ProvisioningMins  int
	PreemptNoticeMins int // notice before preemption of interruptible capacity

	// Prices, cents.
	PriceCentsPerDeviceHour Cents
	Interruptible           bool
	InterruptibleCentsPerDH Cents // price when booked as interruptible
	StorageCentsPerGBMonth  Cents
	EgressCentsPerGB        Cents

	// Settlement terms.
	BillingBasis    BillingBasis
	UptimeBP        int // guaranteed uptime, basis points (9950 = 99.50 %)
	CreditSchedule  []CreditTier
	CreditCapBP     int // most that credits may refund, basis points of the amount paid
	FreeCancelHours int // free cancellation until this many hours before start
	CancelFeeBP     int // fee after that, basis points of the reservation amount
	// RejectMinutes is the acceptance period: for this many minutes from
	// a rental's start the buyer may reject it for a full refund (0: no
	// rejection). See RejectionWindow.
	RejectMinutes int

	Figures []Figure

	Review     ReviewState
	ReviewNote string // reason shown to the provider when rejected or changes asked
	State      OfferState
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// Devices is the offer's total device count.
func (o Offer) Devices() int { return o.DevicesPerNode * o.Nodes }

// Listed reports whether the offer appears in the catalogue and the matcher.
func (o Offer) Listed() bool { return o.Review == ReviewApproved && o.State == OfferActive }

// Accelerator returns the offer's catalogue entry (zero if unknown).
func (o Offer) Accelerator() Accelerator { a, _ := FindAccelerator(o.AcceleratorID); return a }

// Region returns the offer's region (zero if unknown).
func (o Offer) Region() Region { r, _ := FindRegion(o.RegionID); return r }

// Network returns the offer's inter-node network (zero if unknown).
func (o Offer) Network() Network { n, _ := FindNetwork(o.NetworkID); return n }

// Figure returns the offer's figure of the given kind.
func (o Offer) Figure(k FigureKind) (Figure, bool) {
	for _, f := range o.Figures {
		if f.Kind == k {
			return f, true
		}
	}
	return Figure{}, false
}

// Limits on offer fields, kept in one place so forms can show them.
const (
	MaxDevicesPerNode = 16
	MaxNodes          = 4096
	MaxPriceCents     = 100_000 // $1,000 per device-hour
	// MaxListingHours is the longest availability window, and so the
	// longest rental, an offer may state: three years.
	MaxListingHours = 3 * 366 * 24
)

// ValidateOffer checks every field of an offer a provider submits and returns
// an invalid *Error whose Fields name each bad field with a message a person
// can act on. now bounds the availability window (it must not have ended).
// It also fills derived defaults: the region's carbon intensity when none is
// stated. Review, State and the ids are not the provider's to set.
func ValidateOffer(o *Offer, now time.Time) error {
	p := Problems{}
	o.Title = strings.TrimSpace(o.Title)
	switch {
	case o.Title == "":
		p.Add("title", "Give the offer a short title buyers will recognise.")
	case len(o.Title) > 120:
		p.Add("title", "Keep the title under 120 characters.")
	}
	textField(p, "title", o.Title, false)

	acc, ok := FindAccelerator(o.AcceleratorID)
	if !ok {
		p.Add("accelerator", "Choose an accelerator from the catalogue.")
	} else if o.MemoryGB != acc.MemoryGB {
		p.Add("memory_gb", fmt.Sprintf("The %s has %d GB per device; the catalogue does not allow %d GB.", acc.Name, acc.MemoryGB, o.MemoryGB))
	}
	if o.DevicesPerNode < 1 || o.DevicesPerNode > MaxDevicesPerNode {
		p.Add("devices_per_node", fmt.Sprintf("Devices per node must be between 1 and %d.", MaxDevicesPerNode))
	}
	if o.Nodes < 1 || o.Nodes > MaxNodes {
		p.Add("nodes", fmt.Sprintf("Nodes must be between 1 and %d.", MaxNodes))
	}
	if o.Interconnect.Rank() == 0 {
		p.Add("interconnect", "Choose PCIe or NVLink.")
	} else if o.Interconnect == InterconnectNVLink && o.DevicesPerNode == 1 {
		p.Add("interconnect", "A single device per node has no NVLink peers; choose PCIe.")
	}
	net, ok := FindNetwork(o.NetworkID)
	switch {
	case !ok:
		p.Add("network", "Choose the network between nodes.")
	case o.Nodes > 1 && net.Gbps == 0:
		p.Add("network", "Several nodes need a network between them.")
	}
	if o.PlacementGroup && o.Nodes > 1 && !net.RDMA {
		p.Add("placement_group", "A multi-node placement group needs an RDMA fabric (InfiniBand or RoCE).")
	}
	if o.CPUCores < 1 || o.CPUCores > 1024 {
		p.Add("cpu_cores", "CPU cores per node must be between 1 and 1024.")
	}
	if o.RAMGB < 1 || o.RAMGB > 65536 {
		p.Add("ram_gb", "RAM per node must be between 1 and 65,536 GB.")
	}
	if o.StorageGB < 0 || o.StorageGB > 10_000_000 {
		p.Add("storage_gb", "Local storage must be between 0 and 10,000,000 GB.")
	}

	o.DriverVersion = strings.TrimSpace(o.DriverVersion)
	o.CUDAVersion = strings.TrimSpace(o.CUDAVersion)
	if msg := versionProblem(o.DriverVersion, "the driver version", "550.54.15"); msg != "" {
		p.Add("driver_version", msg)
	}
	stack, example := "the CUDA version", "12.4"
	if acc.Stack == "rocm" {
		stack, example = "the ROCm version", "6.2.41133"
	}
	if msg := versionProblem(o.CUDAVersion, stack, example); msg != "" {
		p.Add("cuda_version", msg)
	}
	o.OSImage = strings.TrimSpace(o.OSImage)
	o.ContainerRuntime = strings.TrimSpace(o.ContainerRuntime)
	if o.OSImage == "" || len(o.OSImage) > 80 {
		p.Add("os_image", "Name the OS image (under 80 characters), e.g. Ubuntu 22.04.")
	}
	if o.ContainerRuntime == "" || len(o.ContainerRuntime) > 80 {
		p.Add("container_runtime", "Name the container runtime, e.g. Docker 26 with NVIDIA Container Toolkit.")
	}
	textField(p, "os_image", o.OSImage, false)
	textField(p, "container_runtime", o.ContainerRuntime, false)
	validateContainerSupport(p, &o.Containers)
	validateAccess(p, o)

	region, ok := FindRegion(o.RegionID)
	if !ok {
		p.Add("region", "Choose a region from the list.")
	}
	if o.CarbonGPerKWh == 0 && ok {
		o.CarbonGPerKWh = region.DefaultCarbon
	}
	if o.CarbonGPerKWh < 0 || o.CarbonGPerKWh > 1500 {
		p.Add("carbon", "Carbon intensity must be between 0 and 1,500 gCO2/kWh (leave empty for the regional default).")
	}
	if len(o.PowerNote) > 300 {
		p.Add("power_note", "Keep the power note under 300 characters.")
	}
	textField(p, "power_note", o.PowerNote, false)

	switch {
	case o.AvailableFrom.IsZero():
		p.Add("available_from", "Enter when the capacity becomes available.")
	case o.AvailableUntil.IsZero():
		p.Add("available_until", "Enter when the capacity stops being available.")
	case !o.AvailableUntil.After(o.AvailableFrom):
		p.Add("available_until", "The window must end after it starts.")
	case !o.AvailableUntil.After(now):
		p.Add("available_until", "The window has already ended.")
	case o.AvailableUntil.Sub(o.AvailableFrom) > MaxListingHours*time.Hour:
		p.Add("available_until", "List at most three years at a time.")
	}
	// Bounded so that hours never overflow a duration (about 2.5 million
	// hours) or promise a rental no window can hold.
	if o.MinRentalHours < 1 || o.MinRentalHours > MaxListingHours {
		p.Add("min_rental_hours", fmt.Sprintf("The minimum rental must be between 1 and %s hours (three years).", FormatInt(MaxListingHours)))
	}
	switch {
	case o.MaxRentalHours > MaxListingHours:
		p.Add("max_rental_hours", fmt.Sprintf("The maximum rental must be at most %s hours (three years, the longest window an offer may list).", FormatInt(MaxListingHours)))
	case o.MinRentalHours > MaxListingHours:
		// Said above; comparing with it would only repeat it.
	case o.MaxRentalHours < o.MinRentalHours:
		p.Add("max_rental_hours", "The maximum rental must be at least the minimum.")
	case o.AvailableUntil.After(o.AvailableFrom) && !o.AvailableFrom.IsZero() &&
		time.Duration(o.MinRentalHours)*time.Hour > o.AvailableUntil.Sub(o.AvailableFrom):
		p.Add("min_rental_hours", "The minimum rental is longer than the availability window.")
	}
	if o.ProvisioningMins < 0 || o.ProvisioningMins > 24*60 {
		p.Add("provisioning_mins", "Provisioning time must be between 0 and 1,440 minutes.")
	}

	if o.PriceCentsPerDeviceHour < 1 || o.PriceCentsPerDeviceHour > MaxPriceCents {
		p.Add("price", "The on-demand price must be between $0.01 and $1,000.00 per device-hour.")
	}
	if o.Interruptible {
		switch {
		case o.InterruptibleCentsPerDH < 1:
			p.Add("interruptible_price", "Enter the spot floor price, or untick interruptible.")
		case o.InterruptibleCentsPerDH > o.PriceCentsPerDeviceHour:
			p.Add("interruptible_price", "The spot floor price cannot exceed the on-demand price.")
		}
		if o.PreemptNoticeMins < 0 || o.PreemptNoticeMins > 24*60 {
			p.Add("preempt_notice_mins", "Preemption notice must be between 0 and 1,440 minutes.")
		}
	} else {
		o.InterruptibleCentsPerDH = 0
		o.PreemptNoticeMins = 0
	}
	if o.StorageCentsPerGBMonth < 0 || o.StorageCentsPerGBMonth > 10_000 {
		p.Add("storage_price", "Storage must be between $0.00 and $100.00 per GB-month.")
	}
	if o.EgressCentsPerGB < 0 || o.EgressCentsPerGB > 10_000 {
		p.Add("egress_price", "Egress must be between $0.00 and $100.00 per GB.")
	}

	switch o.BillingBasis {
	case BillingWallClock, BillingCommittedBlock, BillingSuccessfulWork:
	default:
		p.Add("billing_basis", "Choose a billing basis.")
	}
	if o.UptimeBP < 9000 || o.UptimeBP > 10000 {
		p.Add("uptime", "The uptime guarantee must be between 90.00% and 100.00%.")
	} else if msg := validateCreditSchedule(o.CreditSchedule, o.UptimeBP); msg != "" {
		p.Add("credit_schedule", msg)
	}
	if o.CreditCapBP < 0 || o.CreditCapBP > 10000 {
		p.Add("credit_cap", "The credit cap must be between 0% and 100%.")
	}
	if o.FreeCancelHours < 0 || o.FreeCancelHours > 24*90 {
		p.Add("free_cancel_hours", "Free cancellation must be between 0 and 2,160 hours before start.")
	}
	if o.CancelFeeBP < 0 || o.CancelFeeBP > 10000 {
		p.Add("cancel_fee", "The cancellation fee must be between 0% and 100%.")
	}
	if o.RejectMinutes < 0 || o.RejectMinutes > MaxRejectMinutes {
		p.Add("reject_minutes", fmt.Sprintf("The acceptance period must be between 0 and %s minutes.", FormatInt(int64(MaxRejectMinutes))))
	}

	seen := map[FigureKind]bool{}
	for _, f := range o.Figures {
		field := "figure_" + string(f.Kind)
		if !knownFigure(f.Kind) {
			p.Add("figures", "Unknown performance figure.")
			continue
		}
		if seen[f.Kind] {
			p.Add(field, "Each figure may be stated once.")
		}
		seen[f.Kind] = true
		if f.Value <= 0 || f.Value > 1_000_000_000 {
			p.Add(field, "Enter a positive value.")
		}
		switch f.Basis {
		case FigureGuaranteed:
		case FigureEstimated:
			if strings.TrimSpace(f.Method) == "" {
				p.Add(field, "Say how this estimate was measured (benchmark, model, batch size).")
			}
		case FigureVerified:
			// Only an admin sets verified; the store keeps an existing
			// verification, the provider cannot claim one.
			if f.VerifiedNote == "" {
				p.Add(field, "Only the platform can mark a figure verified.")
			}
		default:
			p.Add(field, "Say whether the figure is guaranteed or estimated.")
		}
		if len(f.Method) > 300 {
			p.Add(field, "Keep the method under 300 characters.")
		}
		textField(p, field, f.Method, false)
	}
	return p.Err()
}

func knownFigure(k FigureKind) bool {
	for _, fk := range FigureKinds {
		if fk.Kind == k {
			return true
		}
	}
	return false
}

func validateCreditSchedule(tiers []CreditTier, uptimeBP int) string {
	prevBelow, prevCredit := 10001, -1
	for i, t := range tiers {
		if t.BelowBP <= 0 || t.BelowBP > 10000 || t.CreditBP <= 0 || t.CreditBP > 10000 {
			return fmt.Sprintf("Tier %d: uptime and credit must be between 0%% and 100%%.", i+1)
		}
		if t.BelowBP > uptimeBP {
			return fmt.Sprintf("Tier %d starts above the guaranteed uptime.", i+1)
		}
		if t.BelowBP >= prevBelow || t.CreditBP <= prevCredit {
			return "List tiers from the highest uptime down, each with a larger credit."
		}
		prevBelow, prevCredit = t.BelowBP, t.CreditBP
	}
	return ""
}

// ParseCreditSchedule parses "99.5:10, 99:25, 95:100" (uptime below %, credit %)
// into tiers. Percentages take at most two decimals.
func ParseCreditSchedule(s string) ([]CreditTier, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []CreditTier
	for _, item := range strings.Split(s, ",") {
		below, credit, ok := strings.Cut(strings.TrimSpace(item), ":")
		if !ok {
			return nil, fmt.Errorf("write each tier as uptime:credit, e.g. 99.5:10")
		}
		b, err1 := ParseBasisPoints(below)
		c, err2 := ParseBasisPoints(credit)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("write each tier as uptime:credit in percent, e.g. 99.5:10")
		}
		out = append(out, CreditTier{BelowBP: b, CreditBP: c})
	}
	return out, nil
}

// FormatCreditSchedule is the inverse of ParseCreditSchedule.
func FormatCreditSchedule(tiers []CreditTier) string {
	parts := make([]string, len(tiers))
	for i, t := range tiers {
		parts[i] = FormatPercentBP(t.BelowBP) + ":" + FormatPercentBP(t.CreditBP)
	}
	return strings.Join(parts, ", ")
}

// ParseBasisPoints parses a percentage with at most two decimals ("99.5")
// into basis points (9950).
func ParseBasisPoints(s string) (int, error) {
	c, err := ParseCents(strings.TrimSuffix(strings.TrimSpace(s), "%"))
	if err != nil {
		return 0, fmt.Errorf("enter a percentage with at most two decimals")
	}
	if c > 10000 {
		return 0, fmt.Errorf("enter a percentage up to 100")
	}
	return int(c), nil
}

// FormatPercentBP formats basis points as a percentage without trailing
// zeros: 9950 → "99.5", 1000 → "10".
func FormatPercentBP(bp int) string {
	s := Cents(bp).Decimal()
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

package market

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// WorkloadKind says how a job's devices work together, which decides
// whether the matcher may split it.
type WorkloadKind string

// Workload kinds.
const (
	// WorkTraining is tightly coupled: all devices from one placement group
	// of one offer, one start, one end (a gang). Never split.
	WorkTraining WorkloadKind = "training"
	// WorkBatch is loosely coupled: pieces may come from several offers and
	// providers, each at least MinPieceDevices.
	WorkBatch WorkloadKind = "batch"
	// WorkInference is a service: split like batch, but across regions only
	// when SpreadRegions is set.
	WorkInference WorkloadKind = "inference"
)

// Limits on request fields, kept in one place so forms and the JSON decoder
// agree.
const (
	MaxRequestDevices  = MaxDevicesPerNode * MaxNodes
	MaxRequestHours    = 3 * 366 * 24
	MaxCheckpointMins  = 7 * 24 * 60
	MaxRestartMins     = 24 * 60
	MaxDatasetGB       = 10_000_000
	MaxWorkDeviceHours = 100_000_000
	MaxBudgetCents     = Cents(1_000_000_000_00) // $1 billion
	MaxQuoteLimit      = 100
	DefaultQuoteLimit  = 10
	// MaxRequestOffers bounds the offers a request may be pinned to.
	MaxRequestOffers = 20
)

// Workload describes the job.
type Workload struct {
	Kind WorkloadKind
	// Devices is the exact device count of a gang (training) job, or the
	// total devices a split (batch, inference) job needs at once.
	Devices int
	// MinPieceDevices is the smallest piece of a split job (default 1).
	// Ignored for training.
	MinPieceDevices int
	// Hours is the wall-clock duration. Training may leave it 0 and state
	// WorkDeviceHours instead; the duration is then derived per offer from
	// its throughput (faster devices need fewer hours).
	Hours int
	// WorkDeviceHours is the amount of work in device-hours on WorkModelID
	// (an accelerator id; empty means the reference accelerator, i.e. the
	// work is in reference-device-hours).
	WorkDeviceHours int64
	WorkModelID     string
	// CheckpointMins and RestartMins size the work lost per interruption or
	// host failure: on average half a checkpoint interval plus the restart.
	CheckpointMins int
	RestartMins    int
	// DatasetGB is kept on every piece (storage) and moved to pieces outside
	// DataRegionID (egress). Empty DataRegionID means no transfer is priced.
	DatasetGB    int
	DataRegionID string
	// UserRegionIDs (inference) restricts pieces to the geographic groups of
	// the users' regions.
	UserRegionIDs []string
	// SpreadRegions (inference) lets one quote take pieces in several regions.
	SpreadRegions bool
}

// Constraints are hard: an offer that fails one is not used.
type Constraints struct {
	// Families are the allowed accelerator families (empty = any);
	// AcceleratorIDs narrows within them (empty = every model of the
	// allowed families). A model outside the allowed families is invalid.
	AcceleratorIDs  []string
	Families        []string
	MinMemoryGB     int
	MinInterconnect Interconnect // empty = any
	MinNetworkGbps  int
	// Countries is the data-residency rule: every piece of every quote is
	// in one of them (empty = any). RegionIDs narrows within them (empty =
	// every region of the allowed countries); a region outside the allowed
	// countries is invalid.
	RegionIDs []string
	Countries []string
	// EarliestStart and Deadline bound the job: it must run inside
	// [max(now, EarliestStart), Deadline). Zero values mean now and no deadline.
	EarliestStart time.Time
	Deadline      time.Time
	// AllowInterruption books interruptible capacity at its price where an
	// offer sells it; otherwise every piece is booked on demand.
	AllowInterruption     bool
	MaxPricePerDeviceHour Cents // 0 = no limit
	BudgetCents           Cents // total effective cost; 0 = no limit
	MinReliabilityBP      int
	MaxCarbonGPerKWh      int // 0 = no limit
	MinDriverVersion      string
	MinCUDAVersion        string
	RequireVerified       bool // at least one platform-verified figure
	// RequireAgent keeps offers whose hosts run the provider agent (access
	// handed over automatically, outages measured; access.go).
	RequireAgent bool
	// OfferIDs pins the request to these offers (empty = any offer), as
	// "Quote this offer" on an offer's page does.
	OfferIDs []int64
}

// Preferences are weights (0..100) over the feasible quotes. All zero means
// rank by effective cost alone.
type Preferences struct {
	CostWeight        int // lower effective cost
	CarbonWeight      int // lower emissions
	ReliabilityWeight int // higher provider reliability
	StartWeight       int // earlier start
	ProvidersWeight   int // fewer providers
	PreferredWeight   int // more devices on preferred models or regions
	// PreferredAcceleratorIDs and PreferredRegionIDs feed PreferredWeight.
	PreferredAcceleratorIDs []string
	PreferredRegionIDs      []string
	// CarbonAwareStart lets a quote start later inside the buyer's window
	// when its hours are cleaner (see MatchCarbonAware).
	CarbonAwareStart bool
}

// Request is what a buyer asks the matcher for.
type Request struct {
	Workload    Workload
	Constraints Constraints
	Preferences Preferences
	// Limit is the most quotes returned (default DefaultQuoteLimit).
	Limit int
	// Runtime is the buyer's environment (runtime.go); a runtime is a hard
	// constraint: only offers that run containers are used.
	Runtime Runtime
	// Replacement is what the buyer wants done when a host fails
	// (replace.go); the zero value is never.
	Replacement Replacement
}

// ValidateRequest checks a request and returns an invalid *Error whose
// Fields name each bad field (dotted JSON names, e.g. "workload.devices").
// It fills defaults in place: MinPieceDevices 1 for split jobs, the limit.
func ValidateRequest(r *Request) error {
	p := Problems{}
	w, c, pr := &r.Workload, &r.Constraints, &r.Preferences
	switch w.Kind {
	case WorkTraining, WorkBatch, WorkInference:
	default:
		p.Add("workload.kind", "Choose training, batch or inference.")
	}
	if w.Devices < 1 || w.Devices > MaxRequestDevices {
		p.Add("workload.devices", fmt.Sprintf("Devices must be between 1 and %d.", MaxRequestDevices))
	}
	if w.Kind != WorkTraining {
		if w.MinPieceDevices == 0 {
			w.MinPieceDevices = 1
		}
		if w.MinPieceDevices < 1 || w.MinPieceDevices > w.Devices {
			p.Add("workload.min_piece_devices", "The minimum piece must be between 1 and the devices needed.")
		}
	} else if w.MinPieceDevices < 0 || w.MinPieceDevices > MaxRequestDevices {
		p.Add("workload.min_piece_devices", "The minimum piece must not be negative.")
	}
	if w.Hours < 0 || w.Hours > MaxRequestHours {
		p.Add("workload.hours", fmt.Sprintf("Hours must be between 1 and %d.", MaxRequestHours))
	}
	if w.WorkDeviceHours < 0 || w.WorkDeviceHours > MaxWorkDeviceHours {
		p.Add("workload.work_device_hours", fmt.Sprintf("Work must be between 0 and %d device-hours.", MaxWorkDeviceHours))
	}
	if w.Hours == 0 && (w.Kind != WorkTraining || w.WorkDeviceHours == 0) {
		p.Add("workload.hours", "State the duration in hours (training may state the work instead).")
	}
	if w.WorkModelID != "" {
		if _, ok := FindAccelerator(w.WorkModelID); !ok {
			p.Add("workload.work_model", "The work's model must be an accelerator from the catalogue.")
		}
	}
	if w.CheckpointMins < 0 || w.CheckpointMins > MaxCheckpointMins {
		p.Add("workload.checkpoint_mins", fmt.Sprintf("The checkpoint interval must be between 0 and %d minutes.", MaxCheckpointMins))
	}
	if w.RestartMins < 0 || w.RestartMins > MaxRestartMins {
		p.Add("workload.restart_mins", fmt.Sprintf("The restart time must be between 0 and %d minutes.", MaxRestartMins))
	}
	if w.DatasetGB < 0 || w.DatasetGB > MaxDatasetGB {
		p.Add("workload.dataset_gb", fmt.Sprintf("The dataset must be between 0 and %d GB.", MaxDatasetGB))
	}
	if w.DataRegionID != "" {
		if _, ok := FindRegion(w.DataRegionID); !ok {
			p.Add("workload.data_region", "The data's region must be one from the list.")
		}
	}
	for _, id := range w.UserRegionIDs {
		if _, ok := FindRegion(id); !ok {
			p.Add("workload.user_regions", fmt.Sprintf("Unknown region %q.", id))
		}
	}

	for _, id := range c.AcceleratorIDs {
		if _, ok := FindAccelerator(id); !ok {
			p.Add("constraints.accelerators", fmt.Sprintf("Unknown accelerator %q.", id))
		}
	}
	for _, f := range c.Families {
		if !knownFamily(f) {
			p.Add("constraints.families", fmt.Sprintf("Unknown family %q.", f))
		}
	}
	if c.MinMemoryGB < 0 || c.MinMemoryGB > 1024 {
		p.Add("constraints.min_memory_gb", "Minimum memory must be between 0 and 1,024 GB.")
	}
	if c.MinInterconnect != "" && c.MinInterconnect.Rank() == 0 {
		p.Add("constraints.min_interconnect", "Choose pcie or nvlink.")
	}
	if c.MinNetworkGbps < 0 || c.MinNetworkGbps > 10_000 {
		p.Add("constraints.min_network_gbps", "Minimum network must be between 0 and 10,000 Gb/s.")
	}
	for _, id := range c.RegionIDs {
		if _, ok := FindRegion(id); !ok {
			p.Add("constraints.regions", fmt.Sprintf("Unknown region %q.", id))
		}
	}
	for _, cc := range c.Countries {
		if !knownCountry(cc) {
			p.Add("constraints.countries", fmt.Sprintf("No region in country %q.", cc))
		}
	}
	checkNarrowing(p, c)
	if len(c.OfferIDs) > MaxRequestOffers {
		p.Add("constraints.offers", fmt.Sprintf("Pin at most %d offers.", MaxRequestOffers))
	}
	for i, id := range c.OfferIDs {
		if id < 1 || slices.Contains(c.OfferIDs[:i], id) {
			p.Add("constraints.offers", "Offers are named by their numbers, each once.")
		}
	}
	if !c.Deadline.IsZero() && !c.EarliestStart.IsZero() && !c.Deadline.After(c.EarliestStart) {
		p.Add("constraints.deadline", "The deadline must be after the earliest start.")
	}
	if c.MaxPricePerDeviceHour < 0 || c.MaxPricePerDeviceHour > MaxPriceCents {
		p.Add("constraints.max_price_cents", "The maximum price must be between $0.00 and $1,000.00 per device-hour.")
	}
	if c.BudgetCents < 0 || c.BudgetCents > MaxBudgetCents {
		p.Add("constraints.budget_cents", "The budget must be between $0 and $1,000,000,000.")
	}
	if c.MinReliabilityBP < 0 || c.MinReliabilityBP > 10000 {
		p.Add("constraints.min_reliability_bp", "Minimum reliability must be between 0 and 10000 basis points.")
	}
	if c.MaxCarbonGPerKWh < 0 || c.MaxCarbonGPerKWh > 1500 {
		p.Add("constraints.max_carbon_g_per_kwh", "Maximum carbon intensity must be between 0 and 1,500 gCO2/kWh.")
	}
	if c.MinDriverVersion != "" {
		if msg := versionProblem(c.MinDriverVersion, "the minimum driver version", "550.54.15"); msg != "" {
			p.Add("constraints.min_driver_version", msg)
		}
	}
	if c.MinCUDAVersion != "" {
		if msg := versionProblem(c.MinCUDAVersion, "the minimum CUDA or ROCm version", "12.4 or 6.2.41133"); msg != "" {
			p.Add("constraints.min_cuda_version", msg)
		}
	}

	for name, v := range map[string]int{
		"preferences.cost_weight": pr.CostWeight, "preferences.carbon_weight": pr.CarbonWeight,
		"preferences.reliability_weight": pr.ReliabilityWeight, "preferences.start_weight": pr.StartWeight,
		"preferences.providers_weight": pr.ProvidersWeight, "preferences.preferred_weight": pr.PreferredWeight,
	} {
		if v < 0 || v > 100 {
			p.Add(name, "Weights must be between 0 and 100.")
		}
	}
	for _, id := range pr.PreferredAcceleratorIDs {
		if _, ok := FindAccelerator(id); !ok {
			p.Add("preferences.preferred_accelerators", fmt.Sprintf("Unknown accelerator %q.", id))
		}
	}
	for _, id := range pr.PreferredRegionIDs {
		if _, ok := FindRegion(id); !ok {
			p.Add("preferences.preferred_regions", fmt.Sprintf("Unknown region %q.", id))
		}
	}
	validateRuntime(p, &r.Runtime)
	validateReplacement(p, &r.Replacement)
	if r.Limit == 0 {
		r.Limit = DefaultQuoteLimit
	}
	if r.Limit < 1 || r.Limit > MaxQuoteLimit {
		p.Add("limit", fmt.Sprintf("The limit must be between 1 and %d.", MaxQuoteLimit))
	}
	return p.Err()
}

// checkNarrowing refuses a region outside the allowed countries and a
// model outside the allowed families, naming both fields of each pair: the
// inner list narrows the outer one and never widens it.
func checkNarrowing(p Problems, c *Constraints) {
	var regions, models []string
	for _, id := range c.RegionIDs {
		if r, ok := FindRegion(id); ok && len(c.Countries) > 0 && !inList(c.Countries, r.Country) {
			regions = append(regions, fmt.Sprintf("%s (%s)", r.Name, r.Country))
		}
	}
	if n := len(regions); n > 0 {
		list := strings.Join(regions, ", ")
		p.Add("constraints.regions", fmt.Sprintf("%s %s outside the allowed countries (data residency): remove %s or allow %s.",
			list, either(n, "is", "are"), either(n, "it", "them"), either(n, "its country", "their countries")))
		p.Add("constraints.countries", fmt.Sprintf("The allowed regions name %s, outside these countries: every region must be in an allowed country.", list))
	}
	for _, id := range c.AcceleratorIDs {
		if a, ok := FindAccelerator(id); ok && len(c.Families) > 0 && !inList(c.Families, a.Family) {
			models = append(models, fmt.Sprintf("%s (%s)", a.Name, a.Family))
		}
	}
	if n := len(models); n > 0 {
		list := strings.Join(models, ", ")
		p.Add("constraints.accelerators", fmt.Sprintf("%s %s outside the allowed families: remove %s or allow %s.",
			list, either(n, "is", "are"), either(n, "it", "them"), either(n, "its family", "their families")))
		p.Add("constraints.families", fmt.Sprintf("The allowed models name %s, outside these families: every model must be in an allowed family.", list))
	}
}

// either is one when n is 1, else many.
func either(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func knownFamily(f string) bool {
	for _, a := range accelerators {
		if a.Family == f {
			return true
		}
	}
	return false
}

func knownCountry(cc string) bool {
	for _, r := range regions {
		if r.Country == cc {
			return true
		}
	}
	return false
}

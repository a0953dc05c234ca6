package market

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// JSONVersion is the version of the portable JSON form of requests and
// offers. Decoders accept only this version.
const JSONVersion = 1

// MaxJSONBytes bounds a portable document.
const MaxJSONBytes = 1 << 20

type requestJSON struct {
	Version     int             `json:"version"`
	Workload    workloadJSON    `json:"workload"`
	Constraints constraintsJSON `json:"constraints"`
	Preferences preferencesJSON `json:"preferences"`
	Limit       int             `json:"limit,omitempty"`
	Runtime     *runtimeJSON    `json:"runtime,omitempty"`
	// Replacement is absent for the default (never, no premium).
	Replacement *replacementJSON `json:"replacement,omitempty"`
}

type replacementJSON struct {
	Policy     ReplacementPolicy `json:"policy"`
	MaxPremium Cents             `json:"max_premium_cents,omitempty"`
}

type workloadJSON struct {
	Kind            WorkloadKind `json:"kind"`
	Devices         int          `json:"devices"`
	MinPieceDevices int          `json:"min_piece_devices,omitempty"`
	Hours           int          `json:"hours,omitempty"`
	WorkDeviceHours int64        `json:"work_device_hours,omitempty"`
	WorkModelID     string       `json:"work_model,omitempty"`
	CheckpointMins  int          `json:"checkpoint_mins,omitempty"`
	RestartMins     int          `json:"restart_mins,omitempty"`
	DatasetGB       int          `json:"dataset_gb,omitempty"`
	DataRegionID    string       `json:"data_region,omitempty"`
	UserRegionIDs   []string     `json:"user_regions,omitempty"`
	SpreadRegions   bool         `json:"spread_regions,omitempty"`
}

type constraintsJSON struct {
	AcceleratorIDs        []string     `json:"accelerators,omitempty"`
	Families              []string     `json:"families,omitempty"`
	MinMemoryGB           int          `json:"min_memory_gb,omitempty"`
	MinInterconnect       Interconnect `json:"min_interconnect,omitempty"`
	MinNetworkGbps        int          `json:"min_network_gbps,omitempty"`
	RegionIDs             []string     `json:"regions,omitempty"`
	Countries             []string     `json:"countries,omitempty"`
	EarliestStart         string       `json:"earliest_start,omitempty"`
	Deadline              string       `json:"deadline,omitempty"`
	AllowInterruption     bool         `json:"allow_interruption,omitempty"`
	MaxPricePerDeviceHour Cents        `json:"max_price_cents,omitempty"`
	BudgetCents           Cents        `json:"budget_cents,omitempty"`
	MinReliabilityBP      int          `json:"min_reliability_bp,omitempty"`
	MaxCarbonGPerKWh      int          `json:"max_carbon_g_per_kwh,omitempty"`
	MinDriverVersion      string       `json:"min_driver_version,omitempty"`
	MinCUDAVersion        string       `json:"min_cuda_version,omitempty"`
	RequireVerified       bool         `json:"require_verified,omitempty"`
	RequireAgent          bool         `json:"require_agent,omitempty"`
	OfferIDs              []int64      `json:"offers,omitempty"`
}

type preferencesJSON struct {
	CostWeight              int      `json:"cost_weight,omitempty"`
	CarbonWeight            int      `json:"carbon_weight,omitempty"`
	ReliabilityWeight       int      `json:"reliability_weight,omitempty"`
	StartWeight             int      `json:"start_weight,omitempty"`
	ProvidersWeight         int      `json:"providers_weight,omitempty"`
	PreferredWeight         int      `json:"preferred_weight,omitempty"`
	PreferredAcceleratorIDs []string `json:"preferred_accelerators,omitempty"`
	PreferredRegionIDs      []string `json:"preferred_regions,omitempty"`
	CarbonAwareStart        bool     `json:"carbon_aware_start,omitempty"`
}

// EncodeRequestJSON writes the portable, versioned JSON form of a request
// (the workload description buyers keep beside their code).
func EncodeRequestJSON(r Request) ([]byte, error) {
	w, c, p := r.Workload, r.Constraints, r.Preferences
	doc := requestJSON{
		Version: JSONVersion,
		Workload: workloadJSON{
			Kind: w.Kind, Devices: w.Devices, MinPieceDevices: w.MinPieceDevices, Hours: w.Hours,
			WorkDeviceHours: w.WorkDeviceHours, WorkModelID: w.WorkModelID,
			CheckpointMins: w.CheckpointMins, RestartMins: w.RestartMins,
			DatasetGB: w.DatasetGB, DataRegionID: w.DataRegionID,
			UserRegionIDs: w.UserRegionIDs, SpreadRegions: w.SpreadRegions,
		},
		Constraints: constraintsJSON{
			AcceleratorIDs: c.AcceleratorIDs, Families: c.Families, MinMemoryGB: c.MinMemoryGB,
			MinInterconnect: c.MinInterconnect, MinNetworkGbps: c.MinNetworkGbps,
			RegionIDs: c.RegionIDs, Countries: c.Countries,
			EarliestStart: formatTime(c.EarliestStart), Deadline: formatTime(c.Deadline),
			AllowInterruption: c.AllowInterruption, MaxPricePerDeviceHour: c.MaxPricePerDeviceHour,
			BudgetCents: c.BudgetCents, MinReliabilityBP: c.MinReliabilityBP, MaxCarbonGPerKWh: c.MaxCarbonGPerKWh,
			MinDriverVersion: c.MinDriverVersion, MinCUDAVersion: c.MinCUDAVersion, RequireVerified: c.RequireVerified,
			RequireAgent: c.RequireAgent, OfferIDs: c.OfferIDs,
		},
		Preferences: preferencesJSON(p),
		Limit:       r.Limit,
		Runtime:     encodeRuntimeJSON(r.Runtime),
	}
	if rp := r.Replacement; rp.Effective() != ReplaceNever || rp.MaxPremium != 0 {
		doc.Replacement = &replacementJSON{Policy: rp.Effective(), MaxPremium: rp.MaxPremium}
	}
	return json.MarshalIndent(doc, "", "  ")
}

// DecodeRequestJSON reads the portable JSON form strictly: unknown fields,
// wrong types, trailing data, another version and out-of-range values are
// rejected with an invalid *Error whose Fields name each bad field (dotted,
// e.g. "workload.devices"). The request is validated (ValidateRequest).
func DecodeRequestJSON(data []byte) (Request, error) {
	var doc requestJSON
	if err := decodeStrict(data, &doc); err != nil {
		return Request{}, err
	}
	p := Problems{}
	if doc.Version != JSONVersion {
		p.Add("version", fmt.Sprintf("Set \"version\": %d; this is the only version understood.", JSONVersion))
	}
	start, ok := parseTime(doc.Constraints.EarliestStart)
	if !ok {
		p.Add("constraints.earliest_start", "Write the time as RFC 3339, e.g. 2025-12-03T14:00:00Z.")
	}
	deadline, ok := parseTime(doc.Constraints.Deadline)
	if !ok {
		p.Add("constraints.deadline", "Write the time as RFC 3339, e.g. 2025-12-03T14:00:00Z.")
	}
	if err := p.Err(); err != nil {
		return Request{}, err
	}
	w, c := doc.Workload, doc.Constraints
	r := Request{
		Workload: Workload{
			Kind: w.Kind, Devices: w.Devices, MinPieceDevices: w.MinPieceDevices, Hours: w.Hours,
			WorkDeviceHours: w.WorkDeviceHours, WorkModelID: w.WorkModelID,
			CheckpointMins: w.CheckpointMins, RestartMins: w.RestartMins,
			DatasetGB: w.DatasetGB, DataRegionID: w.DataRegionID,
			UserRegionIDs: w.UserRegionIDs, SpreadRegions: w.SpreadRegions,
		},
		Constraints: Constraints{
			AcceleratorIDs: c.AcceleratorIDs, Families: c.Families, MinMemoryGB: c.MinMemoryGB,
			MinInterconnect: c.MinInterconnect, MinNetworkGbps: c.MinNetworkGbps,
			RegionIDs: c.RegionIDs, Countries: c.Countries, EarliestStart: start, Deadline: deadline,
			AllowInterruption: c.AllowInterruption, MaxPricePerDeviceHour: c.MaxPricePerDeviceHour,
			BudgetCents: c.BudgetCents, MinReliabilityBP: c.MinReliabilityBP, MaxCarbonGPerKWh: c.MaxCarbonGPerKWh,
			MinDriverVersion: c.MinDriverVersion, MinCUDAVersion: c.MinCUDAVersion, RequireVerified: c.RequireVerified,
			RequireAgent: c.RequireAgent, OfferIDs: c.OfferIDs,
		},
		Preferences: Preferences(doc.Preferences),
		Limit:       doc.Limit,
		Runtime:     decodeRuntimeJSON(doc.Runtime),
	}
	if doc.Replacement != nil {
		r.Replacement = Replacement(*doc.Replacement)
	}
	if err := ValidateRequest(&r); err != nil {
		return Request{}, err
	}
	return r, nil
}

type offerJSON struct {
	Version          int          `json:"version"`
	Title            string       `json:"title"`
	AcceleratorID    string       `json:"accelerator"`
	MemoryGB         int          `json:"memory_gb"`
	DevicesPerNode   int          `json:"devices_per_node"`
	Nodes            int          `json:"nodes"`
	Interconnect     Interconnect `json:"interconnect"`
	NetworkID        string       `json:"network"`
	PlacementGroup   bool         `json:"placement_group,omitempty"`
	CPUCores         int          `json:"cpu_cores"`
	RAMGB            int          `json:"ram_gb"`
	StorageGB        int          `json:"storage_gb"`
	DriverVersion    string       `json:"driver_version"`
	CUDAVersion      string       `json:"cuda_version"`
	OSImage          string       `json:"os_image"`
	ContainerRuntime string       `json:"container_runtime"`
	RegionID         string       `json:"region"`
	CarbonGPerKWh    int          `json:"carbon_g_per_kwh,omitempty"`
	PowerNote        string       `json:"power_note,omitempty"`

	AvailableFrom     string `json:"available_from"`
	AvailableUntil    string `json:"available_until"`
	MinRentalHours    int    `json:"min_rental_hours"`
	MaxRentalHours    int    `json:"max_rental_hours"`
	ProvisioningMins  int    `json:"provisioning_mins,omitempty"`
	PreemptNoticeMins int    `json:"preempt_notice_mins,omitempty"`

	PriceCentsPerDeviceHour Cents `json:"price_cents"`
	Interruptible           bool  `json:"interruptible,omitempty"`
	InterruptibleCentsPerDH Cents `json:"interruptible_price_cents,omitempty"`
	StorageCentsPerGBMonth  Cents `json:"storage_cents_per_gb_month,omitempty"`
	EgressCentsPerGB        Cents `json:"egress_cents_per_gb,omitempty"`

	BillingBasis    BillingBasis `json:"billing_basis"`
	UptimeBP        int          `json:"uptime_bp"`
	CreditSchedule  []CreditTier `json:"credit_schedule,omitempty"`
	CreditCapBP     int          `json:"credit_cap_bp,omitempty"`
	FreeCancelHours int          `json:"free_cancel_hours,omitempty"`
	CancelFeeBP     int          `json:"cancel_fee_bp,omitempty"`
	// RejectMinutes is the acceptance period; absent means
	// DefaultRejectMinutes, 0 none.
	RejectMinutes *int `json:"reject_minutes,omitempty"`

	Figures []figureJSON `json:"figures,omitempty"`

	Containers *containersJSON `json:"containers,omitempty"`

	// Access is "agent" (absent: the hosts run the provider agent) or
	// "manual", with AccessInstructions.
	Access             AccessMode `json:"access,omitempty"`
	AccessInstructions string     `json:"access_instructions,omitempty"`
}

type figureJSON struct {
	Kind   FigureKind  `json:"kind"`
	Value  int64       `json:"value"`
	Basis  FigureBasis `json:"basis"`
	Method string      `json:"method,omitempty"`
}

// offerFieldJSON maps ValidateOffer's field names to the JSON names where
// they differ.
var offerFieldJSON = map[string]string{
	"carbon": "carbon_g_per_kwh", "price": "price_cents", "interruptible_price": "interruptible_price_cents",
	"storage_price": "storage_cents_per_gb_month", "egress_price": "egress_cents_per_gb",
	"uptime": "uptime_bp", "credit_cap": "credit_cap_bp", "cancel_fee": "cancel_fee_bp",
	"container_engine": "containers.engine", "container_max_image_gb": "containers.max_image_gb",
}

// EncodeOfferJSON writes the portable, versioned JSON form of an offer's
// contract: no ids, moderation state or verification notes.
func EncodeOfferJSON(o Offer) ([]byte, error) {
	doc := offerJSON{
		Version: JSONVersion, Title: o.Title, AcceleratorID: o.AcceleratorID, MemoryGB: o.MemoryGB,
		DevicesPerNode: o.DevicesPerNode, Nodes: o.Nodes, Interconnect: o.Interconnect, NetworkID: o.NetworkID,
		PlacementGroup: o.PlacementGroup, CPUCores: o.CPUCores, RAMGB: o.RAMGB, StorageGB: o.StorageGB,
		DriverVersion: o.DriverVersion, CUDAVersion: o.CUDAVersion, OSImage: o.OSImage, ContainerRuntime: o.ContainerRuntime,
		RegionID: o.RegionID, CarbonGPerKWh: o.CarbonGPerKWh, PowerNote: o.PowerNote,
		AvailableFrom: formatTime(o.AvailableFrom), AvailableUntil: formatTime(o.AvailableUntil),
		MinRentalHours: o.MinRentalHours, MaxRentalHours: o.MaxRentalHours,
		ProvisioningMins: o.ProvisioningMins, PreemptNoticeMins: o.PreemptNoticeMins,
		PriceCentsPerDeviceHour: o.PriceCentsPerDeviceHour, Interruptible: o.Interruptible,
		InterruptibleCentsPerDH: o.InterruptibleCentsPerDH, StorageCentsPerGBMonth: o.StorageCentsPerGBMonth,
		EgressCentsPerGB: o.EgressCentsPerGB, BillingBasis: o.BillingBasis, UptimeBP: o.UptimeBP,
		CreditSchedule: o.CreditSchedule, CreditCapBP: o.CreditCapBP, FreeCancelHours: o.FreeCancelHours,
		CancelFeeBP: o.CancelFeeBP, RejectMinutes: &o.RejectMinutes,
		Containers: encodeContainersJSON(o.Containers),
		Access:     o.Access, AccessInstructions: o.AccessInstructions,
	}
	for _, f := range o.Figures {
		basis := f.Basis
		if basis == FigureVerified {
			basis = FigureGuaranteed // verification belongs to the platform, not the document
		}
		doc.Figures = append(doc.Figures, figureJSON{Kind: f.Kind, Value: f.Value, Basis: basis, Method: f.Method})
	}
	return json.MarshalIndent(doc, "", "  ")
}

// DecodeOfferJSON reads the portable JSON form of an offer strictly and
// validates it with ValidateOffer at now; Fields use the JSON names. The
// offer comes back without ids, pending review and active.
func DecodeOfferJSON(data []byte, now time.Time) (Offer, error) {
	var doc offerJSON
	if err := decodeStrict(data, &doc); err != nil {
		return Offer{}, err
	}
	p := Problems{}
	if doc.Version != JSONVersion {
		p.Add("version", fmt.Sprintf("Set \"version\": %d; this is the only version understood.", JSONVersion))
	}
	from, ok := parseTime(doc.AvailableFrom)
	if !ok {
		p.Add("available_from", "Write the time as RFC 3339, e.g. 2025-12-03T14:00:00Z.")
	}
	until, ok := parseTime(doc.AvailableUntil)
	if !ok {
		p.Add("available_until", "Write the time as RFC 3339, e.g. 2025-12-03T14:00:00Z.")
	}
	if err := p.Err(); err != nil {
		return Offer{}, err
	}
	o := Offer{
		Title: doc.Title, AcceleratorID: doc.AcceleratorID, MemoryGB: doc.MemoryGB,
		DevicesPerNode: doc.DevicesPerNode, Nodes: doc.Nodes, Interconnect: doc.Interconnect, NetworkID: doc.NetworkID,
		PlacementGroup: doc.PlacementGroup, CPUCores: doc.CPUCores, RAMGB: doc.RAMGB, StorageGB: doc.StorageGB,
		DriverVersion: doc.DriverVersion, CUDAVersion: doc.CUDAVersion, OSImage: doc.OSImage, ContainerRuntime: doc.ContainerRuntime,
		RegionID: doc.RegionID, CarbonGPerKWh: doc.CarbonGPerKWh, PowerNote: doc.PowerNote,
		AvailableFrom: from, AvailableUntil: until,
		MinRentalHours: doc.MinRentalHours, MaxRentalHours: doc.MaxRentalHours,
		ProvisioningMins: doc.ProvisioningMins, PreemptNoticeMins: doc.PreemptNoticeMins,
		PriceCentsPerDeviceHour: doc.PriceCentsPerDeviceHour, Interruptible: doc.Interruptible,
		InterruptibleCentsPerDH: doc.InterruptibleCentsPerDH, StorageCentsPerGBMonth: doc.StorageCentsPerGBMonth,
		EgressCentsPerGB: doc.EgressCentsPerGB, BillingBasis: doc.BillingBasis, UptimeBP: doc.UptimeBP,
		CreditSchedule: doc.CreditSchedule, CreditCapBP: doc.CreditCapBP, FreeCancelHours: doc.FreeCancelHours,
		CancelFeeBP: doc.CancelFeeBP, RejectMinutes: DefaultRejectMinutes, Review: ReviewPending, State: OfferActive,
		Containers: decodeContainersJSON(doc.Containers),
		Access:     doc.Access, AccessInstructions: doc.AccessInstructions,
	}
	if doc.RejectMinutes != nil {
		o.RejectMinutes = *doc.RejectMinutes
	}
	for _, f := range doc.Figures {
		o.Figures = append(o.Figures, Figure{Kind: f.Kind, Value: f.Value, Basis: f.Basis, Method: f.Method})
	}
	if err := ValidateOffer(&o, now); err != nil {
		var e *Error
		if errors.As(err, &e) {
			fields := map[string]string{}
			for k, v := range e.Fields {
				if j, ok := offerFieldJSON[k]; ok {
					k = j
				}
				fields[k] = v
			}
			return Offer{}, &Error{Code: CodeInvalid, Message: e.Message, Fields: fields}
		}
		return Offer{}, err
	}
	return o, nil
}

// decodeStrict decodes exactly one JSON object into v, rejecting unknown
// fields, wrong types and trailing data with an invalid *Error naming the
// field.
func decodeStrict(data []byte, v any) error {
	if len(data) > MaxJSONBytes {
		return &Error{Code: CodeInvalid, Message: "The document is too large.", Fields: map[string]string{"document": fmt.Sprintf("Keep it under %d bytes.", MaxJSONBytes)}}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			return &Error{Code: CodeInvalid, Message: "The document has data after its end.", Fields: map[string]string{"document": "Remove everything after the closing brace."}}
		}
		return nil
	}
	fields := map[string]string{}
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "document"
		}
		fields[field] = fmt.Sprintf("Expected %s here, not a JSON %s (or a number out of range).", typeName(typeErr.Type.Kind().String()), typeErr.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		fields[name] = fmt.Sprintf("Unknown field %q; check the spelling against version %d of the format.", name, JSONVersion)
	case errors.As(err, &syntaxErr):
		fields["document"] = fmt.Sprintf("Not valid JSON near byte %d.", syntaxErr.Offset)
	default:
		fields["document"] = "Not a valid JSON object."
	}
	return &Error{Code: CodeInvalid, Message: "The JSON document could not be read.", Fields: fields}
}

func typeName(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "a whole number"
	case kind == "string":
		return "a string"
	case kind == "bool":
		return "true or false"
	case kind == "slice":
		return "a list"
	case kind == "struct":
		return "an object"
	}
	return "a " + kind
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func parseTime(s string) (time.Time, bool) {
	if s == "" {
		return time.Time{}, true
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, false
	}
	return t.UTC(), true
}

package web

import (
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/views"
)

// The request builder's fields are named by the portable JSON's dotted
// paths, so the matcher's field errors land next to the right input. Money
// and percentages are typed in dollars and percent: these map the
// matcher's names to the form's.
var requestFieldAlias = map[string]string{
	"constraints.max_price_cents":    "constraints.max_price",
	"constraints.budget_cents":       "constraints.budget",
	"constraints.min_reliability_bp": "constraints.min_reliability",
	"replacement.max_premium_cents":  "replacement.max_premium",
}

// requestTextFields are the builder's fields a person types into (the
// value: true for a textarea, whose line breaks and tabs are kept), which
// requestTextProblems checks so a pasted control character is said next
// to its field (the boundary leaves them to it: queriesCheckingTheirText).
// The builder's selects, checkboxes and pinned offers are not typed and
// stay refused at the boundary.
var requestTextFields = map[string]bool{
	"runtime.image": false, "runtime.on_start": true, "runtime.ports": false, "runtime.env": true, "runtime.min_shm_mb": false,
	"workload.devices": false, "workload.min_piece_devices": false, "workload.hours": false, "workload.work_device_hours": false,
	"workload.checkpoint_mins": false, "workload.restart_mins": false, "workload.dataset_gb": false,
	"constraints.min_memory_gb": false, "constraints.earliest_start": false, "constraints.deadline": false,
	"constraints.max_price": false, "constraints.budget": false, "constraints.min_reliability": false,
	"constraints.max_carbon_g_per_kwh": false, "constraints.min_driver_version": false, "constraints.min_cuda_version": false,
	"preferences.cost_weight": false, "preferences.carbon_weight": false, "preferences.reliability_weight": false,
	"preferences.start_weight": false, "preferences.providers_weight": false, "preferences.preferred_weight": false,
	"replacement.max_premium": false,
}

// requestTextProblems returns market.TextProblem's message for each of the
// builder's typed fields (requestTextFields) whose text cannot be kept,
// keyed by field name, or nil.
func requestTextProblems(q url.Values) map[string]string {
	p := market.Problems{}
	for field, multiline := range requestTextFields {
		for _, v := range q[field] {
			if msg := market.TextProblem(v, multiline); msg != "" {
				p.Add(field, msg)
				break
			}
		}
	}
	if len(p) == 0 {
		return nil
	}
	return p
}

// readRequestForm reads the builder's query or form values into the values
// to redisplay. A form that has never been submitted gets the defaults.
func readRequestForm(q url.Values, now time.Time) views.RequestFormValues {
	if q.Get("workload.kind") == "" {
		return defaultRequestValues(now)
	}
	get := func(k string) string { return strings.TrimSpace(q.Get(k)) }
	return views.RequestFormValues{
		RuntimeTemplate: get("runtime.template"), Image: get("runtime.image"), Launch: get("runtime.launch"),
		OnStart: q.Get("runtime.on_start"), Ports: get("runtime.ports"), Env: q.Get("runtime.env"), MinShmMB: get("runtime.min_shm_mb"),
		Kind: get("workload.kind"), Devices: get("workload.devices"), MinPiece: get("workload.min_piece_devices"),
		Hours: get("workload.hours"), WorkDeviceHours: get("workload.work_device_hours"), WorkModel: get("workload.work_model"),
		CheckpointMins: get("workload.checkpoint_mins"), RestartMins: get("workload.restart_mins"),
		DatasetGB: get("workload.dataset_gb"), DataRegion: get("workload.data_region"),
		UserRegions: q["workload.user_regions"], SpreadRegions: q.Get("workload.spread_regions") != "",
		Accelerators: q["constraints.accelerators"], Families: q["constraints.families"],
		MinMemory: get("constraints.min_memory_gb"), MinInterconnect: get("constraints.min_interconnect"),
		MinNetwork: get("constraints.min_network_gbps"), Regions: q["constraints.regions"], Countries: q["constraints.countries"],
		EarliestStart: get("constraints.earliest_start"), Deadline: get("constraints.deadline"),
		AllowInterruption: q.Get("constraints.allow_interruption") != "",
		MaxPrice:          get("constraints.max_price"), Budget: get("constraints.budget"),
		MinReliability: get("constraints.min_reliability"), MaxCarbon: get("constraints.max_carbon_g_per_kwh"),
		MinDriver: get("constraints.min_driver_version"), MinCUDA: get("constraints.min_cuda_version"),
		RequireVerified: q.Get("constraints.require_verified") != "",
		RequireAgent:    q.Get("constraints.require_agent") != "",
		CostWeight:      get("preferences.cost_weight"), CarbonWeight: get("preferences.carbon_weight"),
		ReliabilityWeight: get("preferences.reliability_weight"), StartWeight: get("preferences.start_weight"),
		ProvidersWeight: get("preferences.providers_weight"), PreferredWeight: get("preferences.preferred_weight"),
		PreferredAccelerators: q["preferences.preferred_accelerators"], PreferredRegions: q["preferences.preferred_regions"],
		CarbonAwareStart:  q.Get("preferences.carbon_aware_start") != "",
		Offers:            q["constraints.offers"],
		ReplacementPolicy: get("replacement.policy"), MaxPremium: get("replacement.max_premium"),
	}
}

// defaultRequestValues is a sensible first request: 8 devices for a day,
// starting within the next week.
func defaultRequestValues(now time.Time) views.RequestFormValues {
	start := now.Truncate(time.Hour).Add(time.Hour)
	return views.RequestFormValues{
		Kind: string(market.WorkBatch), Devices: "8", MinPiece: "1", Hours: "24",
		CheckpointMins: "60", RestartMins: "10", DatasetGB: "500",
		EarliestStart: start.Format(formTimeLayout), Deadline: start.AddDate(0, 0, 7).Format(formTimeLayout),
		CostWeight: "100",
	}
}

// requestFromValues converts the builder's values into a validated request,
// returning per-field messages keyed by form field name.
func requestFromValues(v views.RequestFormValues) (market.Request, map[string]string) {
	p := market.Problems{}
	var r market.Request
	w, c, pr := &r.Workload, &r.Constraints, &r.Preferences
	num := func(field, s string, dst *int) {
		if s == "" {
			return
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			p.Add(field, "Enter a whole number.")
			return
		}
		*dst = n
	}
	w.Kind = market.WorkloadKind(v.Kind)
	num("workload.devices", v.Devices, &w.Devices)
	num("workload.min_piece_devices", v.MinPiece, &w.MinPieceDevices)
	num("workload.hours", v.Hours, &w.Hours)
	if v.WorkDeviceHours != "" {
		n, err := strconv.ParseInt(v.WorkDeviceHours, 10, 64)
		if err != nil {
			p.Add("workload.work_device_hours", "Enter a whole number of device-hours.")
		}
		w.WorkDeviceHours = n
	}
	w.WorkModelID = v.WorkModel
	num("workload.checkpoint_mins", v.CheckpointMins, &w.CheckpointMins)
	num("workload.restart_mins", v.RestartMins, &w.RestartMins)
	num("workload.dataset_gb", v.DatasetGB, &w.DatasetGB)
	w.DataRegionID = v.DataRegion
	w.UserRegionIDs = nonEmpty(v.UserRegions)
	w.SpreadRegions = v.SpreadRegions

	c.AcceleratorIDs = nonEmpty(v.Accelerators)
	c.Families = nonEmpty(v.Families)
	num("constraints.min_memory_gb", v.MinMemory, &c.MinMemoryGB)
	c.MinInterconnect = market.Interconnect(v.MinInterconnect)
	num("constraints.min_network_gbps", v.MinNetwork, &c.MinNetworkGbps)
	c.RegionIDs = nonEmpty(v.Regions)
	c.Countries = nonEmpty(v.Countries)
	instant := func(field, s string, dst *time.Time) {
		if s == "" {
			return
		}
		t, err := time.ParseInLocation(formTimeLayout, s, time.UTC)
		if err != nil {
			p.Add(field, "Enter a date and time, e.g. 2026-12-01T09:00.")
			return
		}
		*dst = t
	}
	instant("constraints.earliest_start", v.EarliestStart, &c.EarliestStart)
	instant("constraints.deadline", v.Deadline, &c.Deadline)
	c.AllowInterruption = v.AllowInterruption
	if v.MaxPrice != "" {
		cents, err := market.ParseCents(v.MaxPrice)
		if err != nil {
			p.Add("constraints.max_price", "Price: "+err.Error()+".")
		}
		c.MaxPricePerDeviceHour = cents
	}
	if v.Budget != "" {
		cents, err := market.ParseCents(v.Budget)
		if err != nil {
			p.Add("constraints.budget", "Budget: "+err.Error()+".")
		}
		c.BudgetCents = cents
	}
	if v.MinReliability != "" {
		bp, err := market.ParseBasisPoints(v.MinReliability)
		if err != nil {
			p.Add("constraints.min_reliability", "Enter a percentage such as 99.")
		}
		c.MinReliabilityBP = bp
	}
	num("constraints.max_carbon_g_per_kwh", v.MaxCarbon, &c.MaxCarbonGPerKWh)
	c.MinDriverVersion, c.MinCUDAVersion = v.MinDriver, v.MinCUDA
	c.RequireVerified = v.RequireVerified
	c.RequireAgent = v.RequireAgent
	for _, s := range nonEmpty(v.Offers) {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			p.Add("constraints.offers", "Offers are named by their numbers.")
			continue
		}
		c.OfferIDs = append(c.OfferIDs, id)
	}

	num("preferences.cost_weight", v.CostWeight, &pr.CostWeight)
	num("preferences.carbon_weight", v.CarbonWeight, &pr.CarbonWeight)
	num("preferences.reliability_weight", v.ReliabilityWeight, &pr.ReliabilityWeight)
	num("preferences.start_weight", v.StartWeight, &pr.StartWeight)
	num("preferences.providers_weight", v.ProvidersWeight, &pr.ProvidersWeight)
	num("preferences.preferred_weight", v.PreferredWeight, &pr.PreferredWeight)
	pr.PreferredAcceleratorIDs = nonEmpty(v.PreferredAccelerators)
	pr.PreferredRegionIDs = nonEmpty(v.PreferredRegions)
	pr.CarbonAwareStart = v.CarbonAwareStart
	r.Limit = 5
	r.Runtime = runtimeFromValues(p, v)
	readReplacement(p, v, &r.Replacement)

	if err := market.ValidateRequest(&r); err != nil {
		for k, msg := range market.FieldErrors(err) {
			if alias, ok := requestFieldAlias[k]; ok {
				k = alias
			}
			p.Add(k, msg)
		}
	}
	if len(p) > 0 {
		return r, p
	}
	return r, nil
}

// requestValues turns a request (e.g. an uploaded JSON file, or a
// relaxation) back into the builder's values.
func requestValues(r market.Request) views.RequestFormValues {
	w, c, pr := r.Workload, r.Constraints, r.Preferences
	itoa := func(n int) string {
		if n == 0 {
			return ""
		}
		return strconv.Itoa(n)
	}
	v := views.RequestFormValues{
		Kind: string(w.Kind), Devices: itoa(w.Devices), MinPiece: itoa(w.MinPieceDevices), Hours: itoa(w.Hours),
		WorkModel: w.WorkModelID, CheckpointMins: itoa(w.CheckpointMins), RestartMins: itoa(w.RestartMins),
		DatasetGB: itoa(w.DatasetGB), DataRegion: w.DataRegionID, UserRegions: w.UserRegionIDs, SpreadRegions: w.SpreadRegions,
		Accelerators: c.AcceleratorIDs, Families: c.Families, MinMemory: itoa(c.MinMemoryGB),
		MinInterconnect: string(c.MinInterconnect), MinNetwork: itoa(c.MinNetworkGbps), Regions: c.RegionIDs, Countries: c.Countries,
		AllowInterruption: c.AllowInterruption, MaxCarbon: itoa(c.MaxCarbonGPerKWh),
		MinDriver: c.MinDriverVersion, MinCUDA: c.MinCUDAVersion, RequireVerified: c.RequireVerified, RequireAgent: c.RequireAgent,
		CostWeight: itoa(pr.CostWeight), CarbonWeight: itoa(pr.CarbonWeight), ReliabilityWeight: itoa(pr.ReliabilityWeight),
		StartWeight: itoa(pr.StartWeight), ProvidersWeight: itoa(pr.ProvidersWeight), PreferredWeight: itoa(pr.PreferredWeight),
		PreferredAccelerators: pr.PreferredAcceleratorIDs, PreferredRegions: pr.PreferredRegionIDs,
		CarbonAwareStart: pr.CarbonAwareStart,
	}
	if w.WorkDeviceHours > 0 {
		v.WorkDeviceHours = strconv.FormatInt(w.WorkDeviceHours, 10)
	}
	if !c.EarliestStart.IsZero() {
		v.EarliestStart = c.EarliestStart.UTC().Format(formTimeLayout)
	}
	if !c.Deadline.IsZero() {
		v.Deadline = c.Deadline.UTC().Format(formTimeLayout)
	}
	if c.MaxPricePerDeviceHour > 0 {
		v.MaxPrice = c.MaxPricePerDeviceHour.Decimal()
	}
	if c.BudgetCents > 0 {
		v.Budget = c.BudgetCents.Decimal()
	}
	if c.MinReliabilityBP > 0 {
		v.MinReliability = market.FormatPercentBP(c.MinReliabilityBP)
	}
	for _, id := range c.OfferIDs {
		v.Offers = append(v.Offers, strconv.FormatInt(id, 10))
	}
	runtimeValues(&v, r.Runtime)
	v.ReplacementPolicy = string(r.Replacement.Effective())
	if r.Replacement.MaxPremium > 0 {
		v.MaxPremium = r.Replacement.MaxPremium.Decimal()
	}
	return v
}

// requestQuery is the builder URL's query for a request, so a relaxation or
// a saved request is one link away.
func requestQuery(v views.RequestFormValues) string {
	q := url.Values{}
	set := func(k, val string) {
		if val != "" {
			q.Set(k, val)
		}
	}
	flag := func(k string, b bool) {
		if b {
			q.Set(k, "1")
		}
	}
	set("workload.kind", v.Kind)
	set("workload.devices", v.Devices)
	set("workload.min_piece_devices", v.MinPiece)
	set("workload.hours", v.Hours)
	set("workload.work_device_hours", v.WorkDeviceHours)
	set("workload.work_model", v.WorkModel)
	set("workload.checkpoint_mins", v.CheckpointMins)
	set("workload.restart_mins", v.RestartMins)
	set("workload.dataset_gb", v.DatasetGB)
	set("workload.data_region", v.DataRegion)
	q["workload.user_regions"] = v.UserRegions
	flag("workload.spread_regions", v.SpreadRegions)
	q["constraints.accelerators"] = v.Accelerators
	q["constraints.families"] = v.Families
	set("constraints.min_memory_gb", v.MinMemory)
	set("constraints.min_interconnect", v.MinInterconnect)
	set("constraints.min_network_gbps", v.MinNetwork)
	q["constraints.regions"] = v.Regions
	q["constraints.countries"] = v.Countries
	set("constraints.earliest_start", v.EarliestStart)
	set("constraints.deadline", v.Deadline)
	flag("constraints.allow_interruption", v.AllowInterruption)
	set("constraints.max_price", v.MaxPrice)
	set("constraints.budget", v.Budget)
	set("constraints.min_reliability", v.MinReliability)
	set("constraints.max_carbon_g_per_kwh", v.MaxCarbon)
	set("constraints.min_driver_version", v.MinDriver)
	set("constraints.min_cuda_version", v.MinCUDA)
	flag("constraints.require_verified", v.RequireVerified)
	flag("constraints.require_agent", v.RequireAgent)
	q["constraints.offers"] = v.Offers
	set("preferences.cost_weight", v.CostWeight)
	set("preferences.carbon_weight", v.CarbonWeight)
	set("preferences.reliability_weight", v.ReliabilityWeight)
	set("preferences.start_weight", v.StartWeight)
	set("preferences.providers_weight", v.ProvidersWeight)
	set("preferences.preferred_weight", v.PreferredWeight)
	q["preferences.preferred_accelerators"] = v.PreferredAccelerators
	q["preferences.preferred_regions"] = v.PreferredRegions
	flag("preferences.carbon_aware_start", v.CarbonAwareStart)
	set("runtime.template", v.RuntimeTemplate)
	set("runtime.image", v.Image)
	if v.Image != "" {
		set("runtime.launch", v.Launch)
	}
	set("runtime.on_start", v.OnStart)
	set("runtime.ports", v.Ports)
	set("runtime.env", v.Env)
	set("runtime.min_shm_mb", v.MinShmMB)
	if v.ReplacementPolicy != string(market.ReplaceNever) {
		set("replacement.policy", v.ReplacementPolicy)
	}
	set("replacement.max_premium", v.MaxPremium)
	for k, vals := range q {
		if len(nonEmpty(vals)) == 0 {
			delete(q, k)
		}
	}
	return q.Encode()
}

func nonEmpty(in []string) []string {
	var out []string
	for _, s := range in {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// readReplacement reads the builder's replacement fieldset (policy, and
// the maximum premium typed in dollars) into r.
func readReplacement(p market.Problems, v views.RequestFormValues, r *market.Replacement) {
	r.Policy = market.ReplacementPolicy(v.ReplacementPolicy)
	if v.MaxPremium != "" {
		cents, err := market.ParseCents(v.MaxPremium)
		if err != nil {
			p.Add("replacement.max_premium", "Premium: "+err.Error()+".")
		}
		r.MaxPremium = cents
	}
}

// replacementPolicyOptions are the replacement policies in the builder's
// select, the default (never) first.
func replacementPolicyOptions() []views.Option {
	var out []views.Option
	for _, pol := range market.ReplacementPolicies() {
		out = append(out, views.Option{Value: string(pol), Label: pol.Label()})
	}
	return out
}

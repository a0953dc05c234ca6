package web

import (
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/views"
)

// formTimeLayout is how <input type="datetime-local"> sends a time; the form
// says the times are UTC.
const formTimeLayout = "2006-01-02T15:04"

// offerFieldOrder is the order fields appear in the form, for the error summary.
var offerFieldOrder = []string{
	"title", "accelerator", "memory_gb", "devices_per_node", "nodes", "interconnect", "network", "placement_group",
	"cpu_cores", "ram_gb", "storage_gb", "driver_version", "cuda_version", "os_image", "container_runtime",
	"container_engine", "container_max_image_gb", "access", "access_instructions",
	"region", "carbon", "power_note", "available_from", "available_until", "min_rental_hours", "max_rental_hours",
	"provisioning_mins", "price", "storage_price", "egress_price", "interruptible_price", "preempt_notice_mins",
	"billing_basis", "uptime", "credit_schedule", "credit_cap", "free_cancel_hours", "cancel_fee", "reject_minutes",
}

func init() {
	for _, fk := range market.FigureKinds {
		offerFieldOrder = append(offerFieldOrder, "figure_"+string(fk.Kind))
	}
}

// readOfferForm reads the posted offer form into the values to redisplay.
func readOfferForm(c echo.Context) views.OfferFormValues {
	v := views.OfferFormValues{
		Title: c.FormValue("title"), Accelerator: c.FormValue("accelerator"), MemoryGB: c.FormValue("memory_gb"),
		DevicesPerNode: c.FormValue("devices_per_node"), Nodes: c.FormValue("nodes"),
		Interconnect: c.FormValue("interconnect"), Network: c.FormValue("network"),
		PlacementGroup: c.FormValue("placement_group") != "",
		CPUCores:       c.FormValue("cpu_cores"), RAMGB: c.FormValue("ram_gb"), StorageGB: c.FormValue("storage_gb"),
		DriverVersion: c.FormValue("driver_version"), CUDAVersion: c.FormValue("cuda_version"),
		OSImage: c.FormValue("os_image"), ContainerRuntime: c.FormValue("container_runtime"),
		Region: c.FormValue("region"), Carbon: c.FormValue("carbon"), PowerNote: c.FormValue("power_note"),
		AvailableFrom: c.FormValue("available_from"), AvailableUntil: c.FormValue("available_until"),
		MinRentalHours: c.FormValue("min_rental_hours"), MaxRentalHours: c.FormValue("max_rental_hours"),
		ProvisioningMins: c.FormValue("provisioning_mins"),
		Price:            c.FormValue("price"), Interruptible: c.FormValue("interruptible") != "",
		InterruptPrice: c.FormValue("interruptible_price"), PreemptNotice: c.FormValue("preempt_notice_mins"),
		StoragePrice: c.FormValue("storage_price"), EgressPrice: c.FormValue("egress_price"),
		BillingBasis: c.FormValue("billing_basis"), Uptime: c.FormValue("uptime"),
		CreditSchedule: c.FormValue("credit_schedule"), CreditCap: c.FormValue("credit_cap"),
		FreeCancelHours: c.FormValue("free_cancel_hours"), CancelFee: c.FormValue("cancel_fee"),
		RejectMinutes:   c.FormValue("reject_minutes"),
		ContainerEngine: c.FormValue("container_engine"), ContainerCDI: c.FormValue("container_cdi") != "",
		ContainerMaxImageGB: c.FormValue("container_max_image_gb"), ContainerImageCache: c.FormValue("container_image_cache") != "",
		SharedHostUser: c.FormValue("shared_host_user") != "",
		Access:         c.FormValue("access"), AccessInstructions: c.FormValue("access_instructions"),
	}
	for _, fk := range market.FigureKinds {
		k := string(fk.Kind)
		v.Figures = append(v.Figures, views.FigureInput{Kind: k, Label: fk.Label, Unit: market.FigureFormUnit(fk.Kind), Step: figureStep(fk.Kind),
			Value:  strings.TrimSpace(c.FormValue("figure_" + k + "_value")),
			Basis:  c.FormValue("figure_" + k + "_basis"),
			Method: strings.TrimSpace(c.FormValue("figure_" + k + "_method"))})
	}
	return v
}

// offerFromForm converts typed values into an offer. Each value that cannot
// even be parsed gets its message here; market.ValidateOffer then checks the
// meaning of the whole contract.
func offerFromForm(v views.OfferFormValues) (market.Offer, market.Problems) {
	p := market.Problems{}
	o := market.Offer{
		Title: v.Title, AcceleratorID: v.Accelerator, Interconnect: market.Interconnect(v.Interconnect),
		NetworkID: v.Network, PlacementGroup: v.PlacementGroup,
		DriverVersion: v.DriverVersion, CUDAVersion: v.CUDAVersion, OSImage: v.OSImage, ContainerRuntime: v.ContainerRuntime,
		RegionID: v.Region, PowerNote: strings.TrimSpace(v.PowerNote), Interruptible: v.Interruptible,
		BillingBasis: market.BillingBasis(v.BillingBasis),
		Access:       market.AccessMode(v.Access), AccessInstructions: v.AccessInstructions,
		Containers: market.ContainerSupport{Engine: market.ContainerEngine(v.ContainerEngine), CDI: v.ContainerCDI,
			ImageCache: v.ContainerImageCache, SharedHostUser: v.SharedHostUser},
	}
	integer := func(field, s string, dst *int, optional bool) {
		s = strings.TrimSpace(s)
		if s == "" && optional {
			return
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			p.Add(field, "Enter a whole number.")
			return
		}
		*dst = n
	}
	money := func(field, s string, dst *market.Cents, optional bool) {
		if strings.TrimSpace(s) == "" && optional {
			return
		}
		c, err := market.ParseCents(s)
		if err != nil {
			p.Add(field, "Amount: "+err.Error()+".")
			return
		}
		*dst = c
	}
	percent := func(field, s string, dst *int) {
		bp, err := market.ParseBasisPoints(s)
		if err != nil {
			p.Add(field, "Enter a percentage such as 99.5 ("+err.Error()+").")
			return
		}
		*dst = bp
	}
	instant := func(field, s string, dst *time.Time) {
		s = strings.TrimSpace(s)
		if s == "" {
			return // ValidateOffer says it is required
		}
		t, err := time.ParseInLocation(formTimeLayout, s, time.UTC)
		if err != nil {
			if t2, err2 := time.Parse(time.RFC3339, s); err2 == nil {
				*dst = t2.UTC()
				return
			}
			p.Add(field, "Enter a date and time, e.g. 2026-12-01T09:00.")
			return
		}
		*dst = t
	}
	integer("memory_gb", v.MemoryGB, &o.MemoryGB, false)
	integer("devices_per_node", v.DevicesPerNode, &o.DevicesPerNode, false)
	integer("nodes", v.Nodes, &o.Nodes, false)
	integer("cpu_cores", v.CPUCores, &o.CPUCores, false)
	integer("ram_gb", v.RAMGB, &o.RAMGB, false)
	integer("storage_gb", v.StorageGB, &o.StorageGB, false)
	integer("carbon", v.Carbon, &o.CarbonGPerKWh, true)
	integer("container_max_image_gb", v.ContainerMaxImageGB, &o.Containers.MaxImageGB, true)
	instant("available_from", v.AvailableFrom, &o.AvailableFrom)
	instant("available_until", v.AvailableUntil, &o.AvailableUntil)
	integer("min_rental_hours", v.MinRentalHours, &o.MinRentalHours, false)
	integer("max_rental_hours", v.MaxRentalHours, &o.MaxRentalHours, false)
	integer("provisioning_mins", v.ProvisioningMins, &o.ProvisioningMins, true)
	money("price", v.Price, &o.PriceCentsPerDeviceHour, false)
	if v.Interruptible {
		money("interruptible_price", v.InterruptPrice, &o.InterruptibleCentsPerDH, false)
		integer("preempt_notice_mins", v.PreemptNotice, &o.PreemptNoticeMins, true)
	}
	money("storage_price", v.StoragePrice, &o.StorageCentsPerGBMonth, true)
	money("egress_price", v.EgressPrice, &o.EgressCentsPerGB, true)
	percent("uptime", v.Uptime, &o.UptimeBP)
	if tiers, err := market.ParseCreditSchedule(v.CreditSchedule); err != nil {
		p.Add("credit_schedule", "Credit schedule: "+err.Error()+".")
	} else {
		o.CreditSchedule = tiers
	}
	percent("credit_cap", v.CreditCap, &o.CreditCapBP)
	integer("free_cancel_hours", v.FreeCancelHours, &o.FreeCancelHours, true)
	// Empty means no acceptance period, as 0 does.
	integer("reject_minutes", v.RejectMinutes, &o.RejectMinutes, true)
	if strings.TrimSpace(v.CancelFee) != "" {
		percent("cancel_fee", v.CancelFee, &o.CancelFeeBP)
	}
	for _, f := range v.Figures {
		if f.Value == "" {
			continue
		}
		n, err := market.ParseFigureValue(market.FigureKind(f.Kind), f.Value)
		if err != nil {
			p.Add("figure_"+f.Kind, strings.ToUpper(err.Error()[:1])+err.Error()[1:]+".")
			continue
		}
		// A figure an admin verified stays verified while its value is
		// unchanged: the store decides that, not the form.
		o.Figures = append(o.Figures, market.Figure{Kind: market.FigureKind(f.Kind), Value: n, Basis: market.FigureBasis(f.Basis), Method: f.Method})
	}
	return o, p
}

// offerFormValues turns a stored offer back into form values for editing.
func offerFormValues(o market.Offer) views.OfferFormValues {
	itoa := strconv.Itoa
	v := views.OfferFormValues{
		Title: o.Title, Accelerator: o.AcceleratorID, MemoryGB: itoa(o.MemoryGB),
		DevicesPerNode: itoa(o.DevicesPerNode), Nodes: itoa(o.Nodes), Interconnect: string(o.Interconnect),
		Network: o.NetworkID, PlacementGroup: o.PlacementGroup, CPUCores: itoa(o.CPUCores), RAMGB: itoa(o.RAMGB),
		StorageGB: itoa(o.StorageGB), DriverVersion: o.DriverVersion, CUDAVersion: o.CUDAVersion,
		OSImage: o.OSImage, ContainerRuntime: o.ContainerRuntime, Region: o.RegionID,
		Carbon: itoa(o.CarbonGPerKWh), PowerNote: o.PowerNote,
		AvailableFrom: o.AvailableFrom.UTC().Format(formTimeLayout), AvailableUntil: o.AvailableUntil.UTC().Format(formTimeLayout),
		MinRentalHours: itoa(o.MinRentalHours), MaxRentalHours: itoa(o.MaxRentalHours), ProvisioningMins: itoa(o.ProvisioningMins),
		Price: o.PriceCentsPerDeviceHour.Decimal(), Interruptible: o.Interruptible,
		StoragePrice: o.StorageCentsPerGBMonth.Decimal(), EgressPrice: o.EgressCentsPerGB.Decimal(),
		BillingBasis: string(o.BillingBasis), Uptime: market.FormatPercentBP(o.UptimeBP),
		CreditSchedule: market.FormatCreditSchedule(o.CreditSchedule), CreditCap: market.FormatPercentBP(o.CreditCapBP),
		FreeCancelHours: itoa(o.FreeCancelHours), CancelFee: market.FormatPercentBP(o.CancelFeeBP),
		RejectMinutes:   itoa(o.RejectMinutes),
		ContainerEngine: string(o.Containers.Engine), ContainerCDI: o.Containers.CDI, ContainerImageCache: o.Containers.ImageCache,
		SharedHostUser: o.Containers.SharedHostUser,
		Access:         string(market.AccessAgent), AccessInstructions: o.AccessInstructions,
	}
	if !o.Access.Agent() {
		v.Access = string(market.AccessManual)
	}
	if o.Containers.MaxImageGB > 0 {
		v.ContainerMaxImageGB = itoa(o.Containers.MaxImageGB)
	}
	if o.Interruptible {
		v.InterruptPrice = o.InterruptibleCentsPerDH.Decimal()
		v.PreemptNotice = itoa(o.PreemptNoticeMins)
	}
	for _, fk := range market.FigureKinds {
		fi := views.FigureInput{Kind: string(fk.Kind), Label: fk.Label, Unit: market.FigureFormUnit(fk.Kind), Step: figureStep(fk.Kind), Basis: string(market.FigureEstimated)}
		if f, ok := o.Figure(fk.Kind); ok {
			fi.Value = market.FormatFigureValue(fk.Kind, f.Value)
			fi.Method = f.Method
			fi.Verified = f.Basis == market.FigureVerified
			if f.Basis == market.FigureGuaranteed {
				fi.Basis = string(market.FigureGuaranteed)
			}
		}
		v.Figures = append(v.Figures, fi)
	}
	return v
}

// figureStep is the figure input's step: a tenth for a percentage, else
// whole numbers.
func figureStep(k market.FigureKind) string {
	if k == market.FigureRelThroughput {
		return "0.1"
	}
	return "1"
}

// newOfferDefaults pre-fills a new offer with sensible terms.
func newOfferDefaults(now time.Time) views.OfferFormValues {
	start := now.Truncate(time.Hour).Add(time.Hour)
	v := offerFormValues(market.Offer{
		DevicesPerNode: 8, Nodes: 1, Interconnect: market.InterconnectNVLink, NetworkID: "none",
		CPUCores: 64, RAMGB: 512, StorageGB: 4000, OSImage: "Ubuntu 22.04", ContainerRuntime: "Docker with NVIDIA Container Toolkit",
		AvailableFrom: start, AvailableUntil: start.AddDate(0, 3, 0), MinRentalHours: 1, MaxRentalHours: 720,
		ProvisioningMins: 10, BillingBasis: market.BillingWallClock, UptimeBP: 9950,
		CreditSchedule: []market.CreditTier{{BelowBP: 9950, CreditBP: 1000}, {BelowBP: 9900, CreditBP: 2500}, {BelowBP: 9500, CreditBP: 10000}},
		CreditCapBP:    10000, FreeCancelHours: 24, CancelFeeBP: 2500, StorageCentsPerGBMonth: 8, EgressCentsPerGB: 5,
		RejectMinutes: market.DefaultRejectMinutes,
	})
	v.Carbon = "" // empty means the region's published average, never a claim of zero
	return v
}

// formOptions are the choices the offer form offers.
func offerFormOptions(v *views.OfferFormView) {
	v.Accelerators = []views.Option{{Value: "", Label: "Choose…"}}
	for _, a := range market.Accelerators() {
		v.Accelerators = append(v.Accelerators, views.Option{Value: a.ID, Label: a.Vendor + " " + a.Name})
	}
	v.Regions = regionOptions("Choose…")
	v.Networks = nil
	for _, n := range market.Networks() {
		v.Networks = append(v.Networks, views.Option{Value: n.ID, Label: n.Label})
	}
	v.Interconnects = []views.Option{
		{Value: string(market.InterconnectNVLink), Label: market.InterconnectNVLink.Label()},
		{Value: string(market.InterconnectPCIe), Label: market.InterconnectPCIe.Label()},
	}
	for _, b := range []market.BillingBasis{market.BillingWallClock, market.BillingCommittedBlock, market.BillingSuccessfulWork} {
		v.Bases = append(v.Bases, views.Option{Value: string(b), Label: b.Label()})
	}
	v.ErrorOrder = offerFieldOrder
}

// regionOptions lists the regions with their countries, after a first
// empty choice labelled first.
func regionOptions(first string) []views.Option {
	out := []views.Option{{Value: "", Label: first}}
	for _, r := range market.Regions() {
		out = append(out, views.Option{Value: r.ID, Label: r.Name + " — " + r.Country})
	}
	return out
}

package web

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
)

const cataloguePageSize = 20

// catalogueFormFields are the filter form's fields as conditions of the
// query language: each is "field op value" with the person's value.
var catalogueFormFields = []struct{ param, field, op string }{
	{"model", "model", "="},
	{"family", "family", "="},
	{"min_memory", "memory", ">="},
	{"min_devices", "devices", ">="},
	{"region", "region", "="},
	{"country", "country", "="},
	{"max_price", "price", "<="},
	{"interruptible", "interruptible", "="},
	{"agent", "agent", "="},
	{"network", "network", ">="},
	{"free_from", "available", "="},
	{"free_hours", "hours", "="},
}

// catalogueSorts are the catalogue's orders, as the sort select and the
// API's sort parameter name them.
var catalogueSorts = []views.Option{
	{Value: store.SortPriceAsc, Label: "Price, lowest first"},
	{Value: store.SortPriceDesc, Label: "Price, highest first"},
	{Value: store.SortMemoryDesc, Label: "Memory per device, most first"},
	{Value: store.SortDevicesDesc, Label: "Devices, most first"},
	{Value: store.SortNewest, Label: "Newest first"},
}

// readCatalogueFilter reads the catalogue's query string. The filter
// form's fields and the query (q) become conditions of one search,
// compiled by market's OfferSearch: one path for both. It returns the
// store filter, the values to redisplay, and a message per field that
// means nothing (unknown values included) or leaves nothing to match.
func readCatalogueFilter(q url.Values) (store.OfferFilter, views.CatalogueFilter, map[string]string) {
	v := views.CatalogueFilter{
		Accelerator: q.Get("model"), Family: q.Get("family"), MinMemory: q.Get("min_memory"),
		MinDevices: q.Get("min_devices"), Region: q.Get("region"), Country: q.Get("country"),
		MaxPrice: q.Get("max_price"), Interruptible: q.Get("interruptible"), Agent: q.Get("agent"), Network: q.Get("network"), Sort: q.Get("sort"),
		Query: q.Get("q"), FreeFrom: q.Get("free_from"), FreeHours: q.Get("free_hours"),
	}
	var f store.OfferFilter
	errs := map[string]string{}
	var form []market.Condition
	for _, ff := range catalogueFormFields {
		val := strings.TrimSpace(q.Get(ff.param))
		if val == "" {
			continue
		}
		c := market.NewCondition(ff.field, ff.op, val)
		if err := f.OfferSearch.Add(c); err != nil {
			errs[ff.param] = market.ErrorMessage(err)
			continue
		}
		form = append(form, c)
	}
	v.FormQuery = market.FormatQuery(form)
	if conds, err := market.ParseQuery(v.Query); err != nil {
		errs["q"] = market.ErrorMessage(err)
	} else {
		for _, c := range conds {
			if err := f.OfferSearch.Add(c); err != nil {
				errs["q"] = market.ErrorMessage(err)
				break
			}
		}
	}
	if v.Sort == "" {
		v.Sort = store.SortPriceAsc
	}
	f.Sort = v.Sort
	known := false
	for _, o := range catalogueSorts {
		known = known || o.Value == v.Sort
	}
	if !known {
		values := make([]string, len(catalogueSorts))
		for i, o := range catalogueSorts {
			values[i] = o.Value
		}
		errs["sort"] = fmt.Sprintf("There is no order “%s”: choose one from the list (%s).", v.Sort, strings.Join(values, ", "))
	}
	return f, v, errs
}

// maxPage bounds page numbers, so an offset never overflows and a deep
// page cannot make the database skip millions of rows.
const maxPage = 10_000

// pageNumber reads a page parameter: empty is the first page; anything but
// a whole number from 1 to maxPage is refused, not replaced by page 1.
func pageNumber(s string) (int, error) {
	if s == "" {
		return 1, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxPage {
		msg := fmt.Sprintf("The page number must be a whole number from 1 to %s.", market.FormatInt(maxPage))
		return 0, &market.Error{Code: market.CodeInvalid, Message: msg, Fields: map[string]string{"page": msg}}
	}
	return n, nil
}

func (h *Handler) handleCatalogue(c echo.Context) error {
	q := c.QueryParams()
	f, fv, errs := readCatalogueFilter(q)
	page, err := pageNumber(q.Get("page"))
	if err != nil {
		return err
	}
	v := views.CatalogueView{Filter: fv, Errors: errs}
	v.Filtered = fv != (views.CatalogueFilter{Sort: store.SortPriceAsc})
	catalogueOptions(&v)
	for _, ff := range catalogueFormFields {
		if val := q.Get(ff.param); val != "" {
			v.SearchHidden = append(v.SearchHidden, views.HiddenField{Name: ff.param, Value: val})
		}
	}
	if s := q.Get("sort"); s != "" && s != store.SortPriceAsc {
		v.SearchHidden = append(v.SearchHidden, views.HiddenField{Name: "sort", Value: s})
	}
	if fv.Query != "" {
		v.FilterHidden = []views.HiddenField{{Name: "q", Value: fv.Query}}
	}
	if fv.FormQuery != "" {
		one := url.Values{"q": {strings.TrimSpace(fv.FormQuery + " " + fv.Query)}}
		if s := q.Get("sort"); s != "" && s != store.SortPriceAsc {
			one.Set("sort", s)
		}
		v.FormQueryURL = "/?" + one.Encode()
	}
	if len(errs) > 0 {
		// Offers found by part of what was asked would look like the answer.
		v.ResultsLabel = "Filter not applied"
		return render(c, http.StatusUnprocessableEntity, views.Catalogue(h.page(c, "Catalogue"), v))
	}
	f.Now = h.now()
	f.Limit, f.Offset = cataloguePageSize, (page-1)*cataloguePageSize
	listings, total, err := h.db.FindOffers(c.Request().Context(), f)
	if err != nil {
		return err
	}
	commitments, err := h.offerCommitments(c.Request().Context(), listings, f.Now)
	if err != nil {
		return err
	}
	for _, l := range listings {
		card := offerCard(l)
		card.Reliability, card.ReliabilitySource, card.ReliabilityMeasured = reliabilityText(h.wf.Reliability(l.Offer.ProviderID))
		cs := commitments[l.Offer.ID]
		card.Free, card.FreeLevel = freeNowLine(l.Offer, cs, f.Now)
		card.FreeWindow = freeWindowLine(l.Offer, cs, f.Free, f.Now)
		v.Offers = append(v.Offers, card)
	}
	switch total {
	case 0:
		v.ResultsLabel = "No offers"
	case 1:
		v.ResultsLabel = "1 offer"
	default:
		from := f.Offset + 1
		to := f.Offset + len(listings)
		v.ResultsLabel = fmt.Sprintf("%d offers", total)
		if total > cataloguePageSize {
			v.ResultsLabel = fmt.Sprintf("Offers %d–%d of %d", from, to, total)
		}
	}
	pageURL := func(n int) string {
		q2 := url.Values{}
		for k, vals := range q {
			if k != "page" && len(vals) > 0 && vals[0] != "" {
				q2.Set(k, vals[0])
			}
		}
		if n > 1 {
			q2.Set("page", strconv.Itoa(n))
		}
		if len(q2) == 0 {
			return "/"
		}
		return "/?" + q2.Encode()
	}
	if page > 1 {
		v.PrevURL = pageURL(page - 1)
	}
	if f.Offset+len(listings) < total {
		v.NextURL = pageURL(page + 1)
	}
	if page == 1 {
		if v.Resale, err = h.resaleCards(c.Request().Context()); err != nil {
			return err
		}
	}
	return render(c, http.StatusOK, views.Catalogue(h.page(c, "Catalogue"), v))
}

func catalogueOptions(v *views.CatalogueView) {
	v.Accelerators = []views.Option{{Value: "", Label: "Any model"}}
	for _, a := range market.Accelerators() {
		v.Accelerators = append(v.Accelerators, views.Option{Value: a.ID, Label: a.Name})
	}
	v.Families = []views.Option{{Value: "", Label: "Any family"}}
	for _, f := range market.Families() {
		v.Families = append(v.Families, views.Option{Value: f, Label: f})
	}
	v.Regions = regionOptions("Any region")
	v.Countries = []views.Option{{Value: "", Label: "Any country"}}
	for _, c := range market.Countries() {
		v.Countries = append(v.Countries, views.Option{Value: c, Label: market.CountryName(c) + " (" + c + ")"})
	}
	v.Networks = []views.Option{{Value: "", Label: "Any (incl. single node)"}}
	seen := map[int]bool{0: true}
	for _, n := range market.Networks() {
		if !seen[n.Gbps] {
			seen[n.Gbps] = true
			v.Networks = append(v.Networks, views.Option{Value: strconv.Itoa(n.Gbps), Label: fmt.Sprintf("At least %d Gb/s", n.Gbps)})
		}
	}
	v.Sorts = catalogueSorts
	for _, f := range market.QueryFields() {
		v.QueryFields = append(v.QueryFields, views.QueryFieldHelp{Name: f.Name, Aliases: f.Aliases, Meaning: f.Meaning, Example: f.Example})
	}
}

func offerCard(l store.OfferListing) views.OfferCard {
	o := l.Offer
	r := o.Region()
	card := views.OfferCard{
		ID: strconv.FormatInt(o.ID, 10), URL: fmt.Sprintf("/offers/%d", o.ID), Title: o.Title,
		Devices:  deviceLine(o),
		Topology: topologyLine(o),
		Region:   r.Name + " (" + r.Country + ")", Provider: providerName(l),
		Price:  o.PriceCentsPerDeviceHour.String(),
		Window: "Available " + formatDate(o.AvailableFrom) + " – " + formatDate(o.AvailableUntil),
		Carbon: fmt.Sprintf("%d gCO2/kWh", o.CarbonGPerKWh),
		Access: accessModeView(o.Access),
	}
	if o.Interruptible {
		card.InterruptiblePrice = o.InterruptibleCentsPerDH.String()
	}
	card.SharedHostUser = l.SharedHostUser()
	for _, f := range o.Figures {
		if f.Basis == market.FigureVerified {
			card.Verified = true
		}
	}
	return card
}

// environmentsSummary is the offer's "Buyer environments" row: what it
// declares, with "shared host user" also when an agent of its nodes
// reports it.
func environmentsSummary(l store.OfferListing) string {
	c := l.Offer.Containers
	c.SharedHostUser = l.SharedHostUser()
	return c.Summary()
}

func providerName(l store.OfferListing) string {
	if l.ProviderOrg != "" {
		return l.ProviderName + " · " + l.ProviderOrg
	}
	return l.ProviderName
}

// reliabilityText is a provider's reliability as pages show it: the
// score, e.g. "97.5%", what it rests on and whether that is measured.
func reliabilityText(r market.Reliability) (score, source string, measured bool) {
	return market.FormatPercentBP(r.BP) + "%", r.Source.Label(), r.Source == market.ReliabilityMeasured
}

func (h *Handler) handleOfferShow(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	return h.renderOfferShow(c, id, http.StatusOK, spotBidForm{}, nil, "")
}

// renderOfferShow renders the offer page with status, and the spot bid
// form as typed with its errors (web/spot.go).
func (h *Handler) renderOfferShow(c echo.Context, id int64, status int, spot spotBidForm, spotErrs map[string]string, spotErr string) error {
	l, err := h.db.FindOfferByID(c.Request().Context(), id)
	if err != nil {
		return err
	}
	o := l.Offer
	u := currentUser(c)
	owner := u != nil && u.ID == o.ProviderID
	admin := u != nil && u.IsAdmin
	listed := o.Listed() && !l.ProviderSuspended
	if !listed && !owner && !admin {
		return market.Errorf(market.CodeNotFound, "There is no such offer.")
	}
	v := offerDetail(l)
	v.OnFailure = market.ReplacementOfferSentence(o)
	v.Reliability, v.ReliabilitySource, v.ReliabilityMeasured = reliabilityText(h.wf.Reliability(o.ProviderID))
	if l.ProviderSuspended {
		v.Status = "Not listed in the catalogue: the provider is suspended."
	} else if !o.Listed() {
		v.Status = "Not listed in the catalogue: " + unlistedReason(o) + "."
		if o.ReviewNote != "" {
			v.Status += " Reviewer's note: " + o.ReviewNote
		}
	}
	if owner && o.State != market.OfferWithdrawn {
		v.CanEdit, v.EditURL = true, fmt.Sprintf("/provider/offers/%d/edit", o.ID)
	}
	if v.Market, err = h.offerMarketView(c.Request().Context(), o, owner); err != nil {
		return err
	}
	if v.Agent, err = h.agentFiguresView(c.Request().Context(), o); err != nil {
		return err
	}
	if v.Listed = listed; listed {
		now := h.now()
		cs, err := h.db.ListOfferCommitments(c.Request().Context(), o.ID, now)
		if err != nil {
			return err
		}
		v.Availability = calendarView(o, cs, now)
		v.Quote = quoteOfferLink(o, u != nil, now)
	}
	if v.Spot, err = h.spotPanel(c.Request().Context(), o, u, listed, spot, spotErrs, spotErr); err != nil {
		return err
	}
	if v.Metered, err = h.meteredStartView(c.Request().Context(), o, u, listed); err != nil {
		return err
	}
	meteredFormFrom(c, &v.Metered)
	return render(c, status, views.OfferDetail(h.page(c, o.Title), v))
}

func offerDetail(l store.OfferListing) views.OfferDetailView {
	o := l.Offer
	acc := o.Accelerator()
	reg := o.Region()
	net := o.Network()
	g := string(market.FigureGuaranteed)
	v := views.OfferDetailView{
		ID: strconv.FormatInt(o.ID, 10), Title: o.Title, Provider: providerName(l),
		Headline: deviceLine(o) + " · " + reg.Name, Price: o.PriceCentsPerDeviceHour.String(),
		Access: accessModeView(o.Access),
	}
	carbonBasis := "estimated"
	carbonNote := fmt.Sprintf("%d gCO2/kWh", o.CarbonGPerKWh)
	if o.CarbonGPerKWh == reg.DefaultCarbon {
		carbonNote += " (regional average: " + reg.CarbonSource + ")"
	}
	v.Sections = []views.Section{
		{Title: "Hardware and topology", Rows: []views.Row{
			{Label: "Accelerator", Value: acc.Vendor + " " + acc.Name, Basis: g},
			{Label: "Memory per device", Value: fmt.Sprintf("%d GB", o.MemoryGB), Basis: g},
			{Label: "Devices", Value: fmt.Sprintf("%d per node × %d node(s) = %d", o.DevicesPerNode, o.Nodes, o.Devices()), Basis: g},
			{Label: "Interconnect in a node", Value: o.Interconnect.Label(), Basis: g},
			{Label: "Network between nodes", Value: net.Label, Basis: g},
			{Label: "Placement group", Value: yesNo(o.PlacementGroup, "All devices share one fabric", "No: tightly coupled jobs stay within one node")},
			{Label: "Host per node", Value: fmt.Sprintf("%d CPU cores, %d GB RAM, %d GB local storage", o.CPUCores, o.RAMGB, o.StorageGB), Basis: g},
			{Label: "Published figures", Value: fmt.Sprintf("%d TFLOPS BF16, %d GB/s memory bandwidth, %d W (vendor)", acc.BF16TFLOPS, acc.MemBWGBs, acc.TDPWatts)},
		}},
		{Title: "Software stack", Rows: []views.Row{
			{Label: "Driver", Value: o.DriverVersion, Basis: g},
			{Label: stackName(acc) + " version", Value: o.CUDAVersion, Basis: g},
			{Label: "OS image", Value: o.OSImage},
			{Label: "Container runtime", Value: o.ContainerRuntime},
			{Label: "Buyer environments", Value: environmentsSummary(l)},
		}},
		{Title: "Location and power", Rows: []views.Row{
			{Label: "Region", Value: reg.Name + ", " + reg.Site, Basis: g},
			{Label: "Country (data residency)", Value: reg.Country, Basis: g},
			{Label: "Grid carbon intensity", Value: carbonNote, Basis: carbonBasis},
			{Label: "Power source", Value: orDash(o.PowerNote)},
		}},
		{Title: "Availability (UTC)", Rows: []views.Row{
			{Label: "Window", Value: formatTime(o.AvailableFrom) + " – " + formatTime(o.AvailableUntil), Basis: g},
			{Label: "Rental length", Value: fmt.Sprintf("%d to %d hours", o.MinRentalHours, o.MaxRentalHours)},
			{Label: "Provisioning time", Value: fmt.Sprintf("%d minutes", o.ProvisioningMins)},
		}},
		{Title: "Prices", Rows: pricesRows(o)},
		{Title: "Settlement terms", Rows: []views.Row{
			{Label: "Billing basis", Value: o.BillingBasis.Label(), Basis: g},
			{Label: "Uptime guarantee", Value: market.FormatPercentBP(o.UptimeBP) + "%", Basis: g},
			{Label: "Credit schedule", Value: creditScheduleText(o.CreditSchedule), Basis: g},
			{Label: "Credit cap", Value: market.FormatPercentBP(o.CreditCapBP) + "% of the amount paid"},
			{Label: "Cancellation", Value: fmt.Sprintf("Free until %d hours before start; %s%% fee after", o.FreeCancelHours, market.FormatPercentBP(o.CancelFeeBP))},
			{Label: "Acceptance period", Value: market.RejectionPolicyText(o.RejectMinutes), Basis: g},
		}},
	}
	for _, fk := range market.FigureKinds {
		f, ok := o.Figure(fk.Kind)
		if !ok {
			continue
		}
		method := f.Method
		if f.Basis == market.FigureVerified && f.VerifiedNote != "" {
			method = "Verified: " + f.VerifiedNote
		}
		v.Figures = append(v.Figures, views.FigureRow{Name: fk.Label, Value: market.FormatFigure(fk.Kind, f.Value), Basis: string(f.Basis), Method: orDash(method)})
	}
	return v
}

func pricesRows(o market.Offer) []views.Row {
	g := string(market.FigureGuaranteed)
	rows := []views.Row{{Label: "On-demand", Value: o.PriceCentsPerDeviceHour.String() + " per device-hour", Basis: g}}
	if o.Interruptible {
		rows = append(rows, views.Row{Label: "Interruptible (spot)", Value: fmt.Sprintf("floor %s per device-hour, %d minutes' notice before preemption", o.InterruptibleCentsPerDH, o.PreemptNoticeMins), Basis: g})
	} else {
		rows = append(rows, views.Row{Label: "Interruptible", Value: "Not offered"})
	}
	rows = append(rows,
		views.Row{Label: "Storage", Value: o.StorageCentsPerGBMonth.String() + " per GB-month", Basis: g},
		views.Row{Label: "Egress", Value: o.EgressCentsPerGB.String() + " per GB", Basis: g},
	)
	return rows
}

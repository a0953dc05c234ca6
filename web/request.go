package web

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/views"
)

// handleRequestBuilder shows the request builder and, once the form has
// been submitted (it is a GET form, so a request can be shared as a link),
// the quotes. With the X-Quotes-Partial header it renders only the quotes,
// for the page's script that refreshes them as the buyer edits.
func (h *Handler) handleRequestBuilder(c echo.Context) error {
	if errs := requestTextProblems(c.QueryParams()); errs != nil {
		// Text that cannot be kept (a pasted escape, say): the form again,
		// as sent, with the message next to the field; nothing is read
		// from the store with it and no quote is asked for.
		v := h.builderView(c, readRequestForm(c.QueryParams(), h.now()))
		v.Errors = errs
		if c.Request().Header.Get("X-Quotes-Partial") != "" {
			return render(c, http.StatusUnprocessableEntity, views.Quotes(v.Quotes))
		}
		return render(c, http.StatusUnprocessableEntity, views.RequestBuilder(h.page(c, "Request compute"), v))
	}
	values := h.withTemplate(c, readRequestForm(c.QueryParams(), h.now()))
	v := h.builderView(c, values)
	status := http.StatusOK
	if c.QueryParam("workload.kind") != "" {
		req, errs := requestFromValues(values)
		v.Errors = errs
		if errs != nil {
			status = http.StatusUnprocessableEntity
		} else if ok, msg := h.quoteAllowed(c); !ok {
			// The page and the form stay; only the quotes are refused.
			status, v.Quotes = http.StatusTooManyRequests, views.QuotesView{Message: msg}
		} else {
			qv, err := h.quotes(c, req)
			if market.ErrorCode(err) == market.CodeRateLimited { // no broad slot free
				setRetryAfter(c, time.Second)
				status, qv = http.StatusTooManyRequests, views.QuotesView{Message: market.ErrorMessage(err)}
			} else if err != nil {
				return err
			}
			if qv.Resale, err = h.resaleSources(c.Request().Context(), req); err != nil {
				return err
			}
			v.Quotes = qv
		}
	}
	if c.Request().Header.Get("X-Quotes-Partial") != "" {
		return render(c, status, views.Quotes(v.Quotes))
	}
	return render(c, status, views.RequestBuilder(h.page(c, "Request compute"), v))
}

// builderView fills the builder's options, saved requests and links.
func (h *Handler) builderView(c echo.Context, values views.RequestFormValues) views.RequestBuilderView {
	query := requestQuery(values)
	v := views.RequestBuilderView{
		Values: values, ExportURL: "/requests/export?" + query, SaveQuery: query,
		Kinds: []views.Option{
			{Value: string(market.WorkTraining), Label: "Training (tightly coupled, one gang)"},
			{Value: string(market.WorkBatch), Label: "Batch (loosely coupled, may be split)"},
			{Value: string(market.WorkInference), Label: "Inference (a service)"},
		},
		Interconnects: []views.Option{{Value: "", Label: "Any"}, {Value: string(market.InterconnectPCIe), Label: "PCIe"}, {Value: string(market.InterconnectNVLink), Label: "NVLink / Infinity Fabric"}},
		Networks:      []views.Option{{Value: "", Label: "Any"}},
		Policies:      replacementPolicyOptions(),
		Quotes:        views.QuotesView{},
	}
	for _, a := range market.Accelerators() {
		v.Accelerators = append(v.Accelerators, views.Option{Value: a.ID, Label: a.Name})
	}
	for _, f := range market.Families() {
		v.Families = append(v.Families, views.Option{Value: f, Label: f})
	}
	for _, r := range market.Regions() {
		v.Regions = append(v.Regions, views.Option{Value: r.ID, Label: r.Name})
	}
	for _, cc := range market.Countries() {
		v.Countries = append(v.Countries, views.Option{Value: cc, Label: market.CountryName(cc) + " (" + cc + ")"})
	}
	seen := map[int]bool{0: true}
	for _, n := range market.Networks() {
		if !seen[n.Gbps] {
			seen[n.Gbps] = true
			v.Networks = append(v.Networks, views.Option{Value: strconv.Itoa(n.Gbps), Label: fmt.Sprintf("%d Gb/s", n.Gbps)})
		}
	}
	if u := currentUser(c); u != nil {
		v.SignedIn = true
		saved, err := h.db.ListSavedRequests(c.Request().Context(), u.ID)
		if err != nil {
			logger(c).Warn("saved requests not listed", "err", err)
		}
		for _, s := range saved {
			v.Saved = append(v.Saved, views.SavedRequestRow{
				Name: s.Name, Updated: formatDate(s.UpdatedAt),
				OpenURL:   fmt.Sprintf("/requests/saved/%d", s.ID),
				DeleteURL: fmt.Sprintf("/requests/saved/%d/delete", s.ID),
			})
		}
	}
	h.pinnedView(c.Request().Context(), &v)
	v.Templates = h.runtimeOptions(c)
	return v
}

// quotes runs the matcher and turns its answer into the quotes view.
func (h *Handler) quotes(c echo.Context, req market.Request) (views.QuotesView, error) {
	now := h.now()
	res, shifts, err := h.wf.Quote(c.Request().Context(), req, now)
	if err != nil {
		return views.QuotesView{}, err
	}
	h.cfg.Metrics.Quoted("web", len(res.Quotes) > 0)
	v := views.QuotesView{Searched: true, Total: res.Total, SignedIn: currentUser(c) != nil,
		LoginURL: "/login?next=" + url.QueryEscape("/requests?"+requestQuery(requestValues(req))), CSRF: h.csrfToken(c),
		Cut: res.Explanation.Cut.Message(), OnFailure: req.Replacement.Sentence()}
	if v.SignedIn { // the request can be left standing (standingorder.go)
		var best *market.Quote
		if len(res.Quotes) > 0 {
			best = &res.Quotes[0]
		}
		of, err := h.orderFormView(c, req, orderInput{}, best, nil, "")
		if err != nil {
			return v, err
		}
		v.Order = &of
	}
	if len(res.Quotes) == 0 {
		v.Summary = res.Explanation.Summary()
		v.Shortfall = res.Explanation.Shortfall
		for _, r := range res.Explanation.Relaxations {
			v.Relaxations = append(v.Relaxations, views.RelaxationLink{Message: r.Message, URL: "/requests?" + requestQuery(requestValues(r.Request))})
		}
		return v, nil
	}
	v.Summary = fmt.Sprintf("%d way(s) to run it, best first", res.Total)
	if res.Total > len(res.Quotes) {
		v.Summary = fmt.Sprintf("Best %d of %d ways to run it", len(res.Quotes), res.Total)
	}
	if res.Explanation.Skipped > 0 {
		// The search stopped once no other offer could rank: these are the
		// best, the count a lower bound.
		v.Summary = fmt.Sprintf("Best %d of at least %d ways to run it", len(res.Quotes), res.Total)
	}
	if res.Explanation.Cut.Unexamined > 0 {
		v.Summary = fmt.Sprintf("Best %d of at least %d ways to run it, among the offers examined", len(res.Quotes), res.Total)
	}
	reqJSON, err := market.EncodeRequestJSON(req)
	if err != nil {
		return v, err
	}
	listings := map[int64]pieceInfo{}
	var quoted []int64
	for _, q := range res.Quotes {
		for _, p := range q.Pieces {
			quoted = append(quoted, p.OfferID)
		}
	}
	metered, err := h.db.MeteredOfferIDs(c.Request().Context(), quoted) // one query for every quoted offer
	if err != nil {
		return v, err
	}
	measured := h.quotedMeasured(c.Request().Context(), res.Quotes)
	for _, q := range res.Quotes {
		card, err := h.quoteCard(c.Request().Context(), req, q, listings, now)
		if err != nil {
			return v, err
		}
		for i, p := range q.Pieces {
			if metered[p.OfferID] {
				card.Pieces[i].MeteredURL = fmt.Sprintf("/offers/%d?devices=%d#metered", p.OfferID, p.Devices)
			}
		}
		card.RequestJSON = string(reqJSON)
		card.QuoteID = market.NewQuoteKey(q, now).String()
		card.ValidUntil = quoteValidity(req, now)
		card.Market = quoteMarketNotes(q, shifts, measured)
		v.Quotes = append(v.Quotes, card)
	}
	return v, nil
}

// pieceInfo is what a quote card shows about a piece's offer.
type pieceInfo struct {
	title, provider string
	verified        bool
	offer           market.Offer // for the cancellation policy a booking would freeze
}

func (h *Handler) pieceInfo(ctx context.Context, id int64, cache map[int64]pieceInfo) (pieceInfo, error) {
	if pi, ok := cache[id]; ok {
		return pi, nil
	}
	l, err := h.db.FindOfferByID(ctx, id)
	if err != nil {
		return pieceInfo{}, err
	}
	pi := pieceInfo{title: l.Offer.Title, provider: providerName(l), offer: l.Offer}
	for _, f := range l.Offer.Figures {
		pi.verified = pi.verified || f.Basis == market.FigureVerified
	}
	cache[id] = pi
	return pi, nil
}

func (h *Handler) quoteCard(ctx context.Context, req market.Request, q market.Quote, cache map[int64]pieceInfo, now time.Time) (views.QuoteCard, error) {
	charged := q.Cost.Charged()
	card := views.QuoteCard{
		Rank:        strconv.Itoa(q.Rank),
		Window:      formatSpan(q.Start, q.End),
		Total:       q.Cost.Total.String(),
		Charged:     charged.String(),
		Emissions:   market.FormatEmissions(q.EmissionsG),
		Reliability: market.FormatPercentBP(q.ReliabilityBP) + "%",
		Providers:   plural(q.Providers, "provider"),
		Segments:    costSegments(q.Cost),
	}
	if extra := q.Cost.Total - charged; extra > 0 {
		card.ChargedNote = fmt.Sprintf("You are charged %s at booking: instance time, storage and egress. The effective cost adds %s of expected paid time that does no useful work (orchestration overhead, failed work, restarts). It ranks the quotes; it is never charged.", charged, extra)
	} else {
		card.ChargedNote = fmt.Sprintf("You are charged %s at booking: instance time, storage and egress. No paid time is expected to go without useful work, so the effective cost is the same.", charged)
	}
	if q.CentsPerRefDeviceHour > 0 {
		card.PerUnit = q.CentsPerRefDeviceHour.String() + " per reference device-hour (A100 80GB SXM)"
	}
	if !q.Exact {
		card.BoundNote = fmt.Sprintf("Chosen by bounded search: at most %s above the cheapest possible split.", (q.Cost.Total - q.LowerBound).String())
	}
	devices, models := 0, map[string]bool{}
	offers := map[int64]market.Offer{}
	for _, p := range q.Pieces {
		info, err := h.pieceInfo(ctx, p.OfferID, cache)
		if err != nil {
			return card, err
		}
		acc, _ := market.FindAccelerator(p.AcceleratorID)
		reg, _ := market.FindRegion(p.RegionID)
		devices += p.Devices
		models[acc.Name] = true
		offers[p.OfferID] = info.offer
		card.Pieces = append(card.Pieces, views.QuotePiece{
			Provider: info.provider, OfferTitle: info.title, OfferURL: fmt.Sprintf("/offers/%d", p.OfferID),
			Model: acc.Name, Devices: strconv.Itoa(p.Devices), Region: reg.Name,
			Start: formatTime(p.Start), End: formatTime(p.End),
			Price: p.PriceCents.String() + "/device-hour", Interruptible: p.Interruptible, Verified: info.verified,
			Access: accessModeView(info.offer.Access),
		})
	}
	names := make([]string, 0, len(models))
	for m := range models {
		names = append(names, m)
	}
	sort.Strings(names)
	card.Headline = fmt.Sprintf("%d × %s", devices, strings.Join(names, " + "))
	if len(q.Pieces) > 1 {
		card.Headline += fmt.Sprintf(", split across %d offers", len(q.Pieces))
	}
	pieces, err := market.PiecesFromQuote(q, offers)
	if err != nil {
		return card, err
	}
	card.Cancellation = cancelScheduleView(market.CancellationScheduleOf(pieces), now, cancelQuoted).Summary
	explainCost(card.Segments, req, q, offers)
	return card, nil
}

// explainCost says, line by line, where each item of a quote's effective
// cost comes from, with the request's and the offers' own figures.
func explainCost(segs []views.CostSegment, req market.Request, q market.Quote, offers map[int64]market.Offer) {
	w := req.Workload
	provMins := map[int]bool{}
	var mins int
	intr := false
	for _, p := range q.Pieces {
		mins = offers[p.OfferID].ProvisioningMins
		provMins[mins] = true
		intr = intr || p.Interruptible
	}
	provisioning := "the providers' stated provisioning time"
	if len(provMins) == 1 {
		provisioning = plural(mins, "minute") + " of provisioning (the provider's figure)"
	}
	notes := map[string]string{}
	if len(q.Pieces) == 1 {
		p := q.Pieces[0]
		notes["instance"] = fmt.Sprintf("%s × %s × %s per device-hour. Charged at booking.", plural(p.Devices, "device"), plural(p.Hours, "hour"), p.PriceCents)
	} else {
		notes["instance"] = "Each piece's devices × hours × its price per device-hour (the pieces are listed below). Charged at booking."
	}
	switch {
	case w.DatasetGB == 0:
		notes["storage"] = "No dataset given, so no storage is priced."
		notes["egress"] = "No dataset given, so no transfer is priced."
	default:
		notes["storage"] = fmt.Sprintf("Keeping the %d GB dataset on each piece for its duration, at the offer's price per GB-month. Charged at booking.", w.DatasetGB)
		if reg, ok := market.FindRegion(w.DataRegionID); ok {
			notes["egress"] = fmt.Sprintf("Moving the %d GB dataset from %s to each piece outside it, at the offer's price per GB. Charged at booking.", w.DatasetGB, reg.Name)
		} else {
			notes["egress"] = "Where the data lives is not given, so moving it is not priced."
		}
	}
	notes["overhead"] = "The devices are paid for during " + provisioning + " at each start, before they can work. Not charged on top: it is booked time your job cannot use."
	failures := "host failures (provider reliability " + market.FormatPercentBP(q.ReliabilityBP) + "%)"
	if intr {
		failures += " and interruptions"
	}
	notes["failed"] = fmt.Sprintf("Expected %s × the work lost to each: half the %d-minute checkpoint interval plus the %d-minute restart. An estimate, not charged.", failures, w.CheckpointMins, w.RestartMins)
	if w.CheckpointMins == 0 && w.RestartMins == 0 {
		notes["failed"] = "Without a checkpoint interval or restart time, no work is counted lost to " + failures + "."
	}
	notes["restart"] = "Provisioning again after each expected failure: " + provisioning + " each time. An estimate, not charged."
	for i := range segs {
		segs[i].Note = notes[segs[i].Key]
	}
}

// costSegments itemises the effective cost for the stacked bar.
func costSegments(c market.CostBreakdown) []views.CostSegment {
	items := []struct {
		key, label string
		v          market.Cents
	}{
		{"instance", "Instance", c.Instance},
		{"storage", "Storage", c.Storage},
		{"egress", "Egress", c.Egress},
		{"overhead", "Orchestration overhead", c.Orchestration},
		{"failed", "Expected failed work", c.FailedWork},
		{"restart", "Restarts", c.Restart},
	}
	out := make([]views.CostSegment, 0, len(items))
	for _, it := range items {
		pct := "0"
		if c.Total > 0 {
			pct = strconv.FormatFloat(float64(it.v)*100/float64(c.Total), 'f', 2, 64) // display width only, not money
		}
		out = append(out, views.CostSegment{Key: it.key, Label: it.label, Amount: it.v.String(), Percent: pct})
	}
	return out
}

// quoteValidity says until when a quote is honoured and, for "as soon as
// possible", that the start moves to the moment of booking.
func quoteValidity(req market.Request, now time.Time) string {
	s := fmt.Sprintf("Price held until %s (%d minutes).", formatTime(market.QuoteValidUntil(now)), int(market.QuoteValidity/time.Minute))
	if !req.Constraints.EarliestStart.After(now) {
		s += " As soon as possible: it starts when you reserve, for the same duration."
	}
	return s
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// handleRequestExport downloads the request as the portable JSON.
func (h *Handler) handleRequestExport(c echo.Context) error {
	req, errs := requestFromValues(readRequestForm(c.QueryParams(), h.now()))
	if errs != nil {
		return &market.Error{Code: market.CodeInvalid, Message: "Correct the request before downloading it.", Fields: errs}
	}
	b, err := market.EncodeRequestJSON(req)
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderContentDisposition, `attachment; filename="gpumarket-request.json"`)
	return c.Blob(http.StatusOK, "application/json", b)
}

// handleRequestUpload fills the builder from an uploaded request file.
func (h *Handler) handleRequestUpload(c echo.Context) error {
	fail := func(msg string) error {
		v := h.builderView(c, defaultRequestValues(h.now()))
		v.UploadError = msg
		return render(c, http.StatusUnprocessableEntity, views.RequestBuilder(h.page(c, "Request compute"), v))
	}
	fh, err := c.FormFile("request_file")
	if err != nil {
		return fail("Choose a request JSON file to upload.")
	}
	f, err := fh.Open()
	if err != nil {
		return fail("The file could not be read.")
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, market.MaxJSONBytes+1))
	if err != nil {
		return fail("The file could not be read.")
	}
	req, err := market.DecodeRequestJSON(data)
	if err != nil {
		return fail(fieldsMessage(err))
	}
	return c.Redirect(http.StatusSeeOther, "/requests?"+requestQuery(requestValues(req)))
}

// fieldsMessage joins an invalid error's field messages into one line,
// naming each field.
func fieldsMessage(err error) string {
	fields := market.FieldErrors(err)
	if len(fields) == 0 {
		return market.ErrorMessage(err)
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + ": " + fields[k]
	}
	return strings.Join(parts, " ")
}

// handleRequestSave stores the builder's request in the buyer's account.
func (h *Handler) handleRequestSave(c echo.Context) error {
	u := currentUser(c)
	q, err := url.ParseQuery(c.FormValue("query"))
	if err != nil {
		return market.Errorf(market.CodeInvalid, "The request could not be read; please try again.")
	}
	values := readRequestForm(q, h.now())
	req, errs := requestFromValues(values)
	name := strings.TrimSpace(c.FormValue("name"))
	if errs == nil && (name == "" || len([]rune(name)) > 80) {
		errs = map[string]string{"name": "Name the request (up to 80 characters)."}
	} else if msg := market.TextProblem(name, false); errs == nil && msg != "" {
		errs = map[string]string{"name": msg}
	}
	if errs != nil {
		v := h.builderView(c, values)
		v.Errors = errs
		return render(c, http.StatusUnprocessableEntity, views.RequestBuilder(h.page(c, "Request compute"), v))
	}
	if _, err := h.wf.SaveRequest(c.Request().Context(), u.ID, name, req); err != nil {
		return err
	}
	h.setFlash(c, "ok", fmt.Sprintf("Saved “%s”.", name))
	return c.Redirect(http.StatusSeeOther, "/requests?"+requestQuery(values))
}

func (h *Handler) handleRequestOpen(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	s, err := h.db.FindSavedRequest(c.Request().Context(), currentUser(c).ID, id)
	if err != nil {
		return err
	}
	req, err := market.DecodeRequestJSON([]byte(s.JSON))
	if err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/requests?"+requestQuery(requestValues(req)))
}

func (h *Handler) handleRequestDelete(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	if err := h.wf.DeleteSavedRequest(c.Request().Context(), currentUser(c).ID, id); err != nil {
		return err
	}
	h.setFlash(c, "ok", "Saved request deleted.")
	return c.Redirect(http.StatusSeeOther, "/requests")
}

// holdDuration is how long an unpaid reservation keeps its capacity.
const holdDuration = market.DefaultHoldMinutes * time.Minute

package web

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
)

// quoteMarketNotes adds the carbon-aware start and measured work on the
// quote's offers (or, without reports there, on their models).
func (h *Handler) quoteMarketNotes(ctx context.Context, q market.Quote, shifts []market.CarbonShift) views.QuoteMarketNotes {
	n := views.QuoteMarketNotes{CarbonBasis: "Board power × devices × each hour it runs × that hour's grid intensity."}
	for _, s := range shifts {
		if s.Rank == q.Rank {
			n.CarbonShift = s.Summary()
		}
	}
	for _, p := range q.Pieces {
		lines, err := h.measuredLines(ctx, p.OfferID, p.AcceleratorID, p.PriceCents)
		if err != nil {
			h.log.Warn("measured work not loaded", "offer_id", p.OfferID, "err", err)
			continue
		}
		n.Measured = append(n.Measured, lines...)
	}
	return n
}

// measuredLines are the measured figures of an offer, or, when nobody
// reported on it, of its accelerator model across offers, each with the
// cost per unit of work at price.
func (h *Handler) measuredLines(ctx context.Context, offerID int64, accID string, price market.Cents) ([]views.MeasuredLine, error) {
	reports, err := h.db.ListWorkReports(ctx, store.WorkReportFilter{OfferIDs: []int64{offerID}})
	if err != nil {
		return nil, err
	}
	scope := "this offer"
	if len(reports) == 0 {
		if reports, err = h.db.ListWorkReports(ctx, store.WorkReportFilter{AcceleratorID: accID}); err != nil {
			return nil, err
		}
		a, _ := market.FindAccelerator(accID)
		scope = "all " + a.Name + " offers"
	}
	return measuredFigureLines(market.AggregateWork(reports), scope, price), nil
}

func measuredFigureLines(figs []market.MeasuredFigure, scope string, price market.Cents) []views.MeasuredLine {
	var out []views.MeasuredLine
	for _, f := range figs {
		l := views.MeasuredLine{Scope: scope,
			Figure:    market.FormatMilli(f.MedianMilliPerDevice) + " " + f.Unit() + " per device",
			Reports:   plural(f.Reports, "report"),
			Lost:      market.FormatPercentBP(int(f.LostBP)) + "% of time lost to restarts and stalls",
			Workloads: strings.Join(f.Workloads, "; ")}
		if c, unit, ok := market.CostPerUnitOfWork(price, f); ok {
			l.Cost = c.String() + " " + unit
		}
		out = append(out, l)
	}
	return out
}

// offerMarketView is the offer page's measured work and carbon profile.
func (h *Handler) offerMarketView(ctx context.Context, o market.Offer, owner bool) (views.OfferMarketView, error) {
	v := views.OfferMarketView{CarbonTitle: "Hourly grid carbon intensity"}
	reports, err := h.db.ListWorkReports(ctx, store.WorkReportFilter{OfferIDs: []int64{o.ID}})
	if err != nil {
		return v, err
	}
	v.Measured = measuredFigureLines(market.AggregateWork(reports), "this offer", o.PriceCentsPerDeviceHour)
	for i := range v.Measured {
		if v.Measured[i].Workloads == "" {
			v.Measured[i].Workloads = "—"
		}
	}
	all, err := h.db.ListWorkReports(ctx, store.WorkReportFilter{AcceleratorID: o.AcceleratorID})
	if err != nil {
		return v, err
	}
	a := o.Accelerator()
	v.ModelLabel = a.Name
	v.ModelLines = measuredFigureLines(market.AggregateWork(all), "all "+a.Name+" offers", o.PriceCentsPerDeviceHour)

	var prof market.CarbonProfile
	own, err := h.db.FindOfferCarbonProfile(ctx, o.ID)
	switch {
	case err == nil:
		prof, v.CarbonSource = own.Profile, "the provider's own figures: "+own.Source
	case market.ErrorCode(err) == market.CodeNotFound:
		prof = market.OfferCarbonProfile(o.RegionID, o.CarbonGPerKWh, nil)
		if _, src, _ := market.RegionCarbonProfile(o.RegionID); prof == regionProfile(o.RegionID) {
			v.CarbonSource = "regional default, " + src
		} else {
			v.CarbonSource = "the intensity the provider states for the site, every hour"
		}
	default:
		return v, err
	}
	lo, hi := prof[0], prof[0]
	for _, g := range prof {
		lo, hi = min(lo, g), max(hi, g)
	}
	for _, g := range prof {
		v.CarbonHours = append(v.CarbonHours, strconv.Itoa(g))
		pct := 100
		if hi > 0 {
			pct = max(g*100/hi, 3)
		}
		v.CarbonBars = append(v.CarbonBars, strconv.Itoa(pct))
	}
	v.CarbonRange = fmt.Sprintf("%d–%d", lo, hi)
	if owner {
		v.CarbonURL = fmt.Sprintf("/provider/offers/%d/carbon", o.ID)
	}
	return v, nil
}

func regionProfile(id string) market.CarbonProfile {
	p, _, _ := market.RegionCarbonProfile(id)
	return p
}

// handleCarbonProfileForm shows the provider's hourly profile form.
func (h *Handler) handleCarbonProfileForm(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	o, err := h.db.FindProviderOffer(c.Request().Context(), currentUser(c).ID, id)
	if err != nil {
		return err
	}
	v := carbonFormView(o)
	if own, err := h.db.FindOfferCarbonProfile(c.Request().Context(), o.ID); err == nil {
		v.Hourly, v.Source, v.HasOwn = own.Profile.String(), own.Source, true
		v.Current = "your own profile (" + own.Source + ")"
	} else if market.ErrorCode(err) != market.CodeNotFound {
		return err
	}
	return render(c, http.StatusOK, views.CarbonProfileForm(h.page(c, "Hourly carbon profile"), v))
}

func carbonFormView(o market.Offer) views.CarbonProfileFormView {
	p := market.OfferCarbonProfile(o.RegionID, o.CarbonGPerKWh, nil)
	_, src, _ := market.RegionCarbonProfile(o.RegionID)
	return views.CarbonProfileFormView{OfferTitle: o.Title, OfferURL: fmt.Sprintf("/offers/%d", o.ID),
		Action: fmt.Sprintf("/provider/offers/%d/carbon", o.ID), DeleteURL: fmt.Sprintf("/provider/offers/%d/carbon/delete", o.ID),
		Hourly: p.String(), Current: "the regional default (" + src + ")"}
}

// handleCarbonProfileSave stores the provider's hourly profile.
func (h *Handler) handleCarbonProfileSave(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	u := currentUser(c)
	o, err := h.db.FindProviderOffer(ctx, u.ID, id)
	if err != nil {
		return err
	}
	v := carbonFormView(o)
	v.Hourly, v.Source = c.FormValue("hourly_g"), strings.TrimSpace(c.FormValue("source"))
	v.Errors = map[string]string{}
	prof, perr := market.ParseCarbonProfile(v.Hourly)
	if perr != nil {
		v.Errors["hourly_g"] = market.ErrorMessage(perr)
	}
	if v.Source == "" || len([]rune(v.Source)) > 200 {
		v.Errors["source"] = "Say where the figures come from (up to 200 characters)."
	} else if msg := market.TextProblem(v.Source, false); msg != "" {
		v.Errors["source"] = msg
	}
	if len(v.Errors) > 0 {
		return render(c, http.StatusUnprocessableEntity, views.CarbonProfileForm(h.page(c, "Hourly carbon profile"), v))
	}
	if err := h.wf.SetOfferCarbonProfile(ctx, u.ID, o.ID, prof, v.Source); err != nil {
		return err
	}
	h.setFlash(c, "ok", "Hourly carbon profile saved; quotes now use it.")
	return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/offers/%d", o.ID))
}

// handleCarbonProfileDelete returns an offer to its region's profile.
func (h *Handler) handleCarbonProfileDelete(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	if err := h.wf.DeleteOfferCarbonProfile(c.Request().Context(), currentUser(c).ID, id); err != nil {
		return err
	}
	h.setFlash(c, "ok", "The offer uses its region's carbon profile again.")
	return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/offers/%d", id))
}

// workReportView builds the reservation page's measured-work section.
func (h *Handler) workReportView(c echo.Context, r market.Reservation, values views.WorkReportValues, errs map[string]string) (views.WorkReportView, error) {
	v := views.WorkReportView{Action: fmt.Sprintf("/reservations/%d/work", r.ID), Values: values, Errors: errs, CSRF: h.csrfToken(c)}
	switch r.State {
	case market.ReservationActive, market.ReservationCompleted, market.ReservationSettled:
		v.CanReport = true
	default:
		v.Closed = "You can report measured throughput once the reservation has started."
	}
	titles := map[int64]string{}
	for _, p := range r.Pieces {
		if _, ok := titles[p.OfferID]; ok {
			continue
		}
		l, err := h.db.FindOfferByID(c.Request().Context(), p.OfferID)
		if err != nil {
			return v, err
		}
		titles[p.OfferID] = l.Offer.Title
		v.Offers = append(v.Offers, views.Option{Value: strconv.FormatInt(p.OfferID, 10), Label: l.Offer.Title})
	}
	reports, err := h.db.ListWorkReports(c.Request().Context(), store.WorkReportFilter{ReservationID: r.ID})
	if err != nil {
		return v, err
	}
	for _, rep := range reports {
		f := market.MeasuredFigure{Metric: rep.Metric, LatencyPercentile: rep.LatencyPercentile}
		v.Reports = append(v.Reports, views.WorkReportRow{
			When: formatTime(rep.CreatedAt), Offer: titles[rep.OfferID],
			Figure:    market.FormatInt(rep.Value) + " " + f.Unit(),
			Effective: market.FormatMilli(rep.EffectiveMilliPerDevice()) + " per device effective",
			Lost:      fmt.Sprintf("%d of %d minutes lost", rep.LostMinutes, rep.ObservedMinutes),
			Workload:  rep.Workload, Note: rep.Note,
		})
	}
	if v.Values == (views.WorkReportValues{}) {
		v.Values = views.WorkReportValues{Metric: string(market.MetricStepsPerHour), Percentile: "95"}
	}
	return v, nil
}

// handleWorkReport records a buyer's measurement on their reservation.
func (h *Handler) handleWorkReport(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	u := currentUser(c)
	r, err := h.db.FindBuyerReservation(ctx, u.ID, id)
	if err != nil {
		return err
	}
	vals := views.WorkReportValues{
		Offer: c.FormValue("offer"), Metric: c.FormValue("metric"), Percentile: c.FormValue("latency_percentile"),
		Workload: c.FormValue("workload"), Value: strings.TrimSpace(c.FormValue("value")),
		Observed: strings.TrimSpace(c.FormValue("observed_minutes")), Lost: strings.TrimSpace(c.FormValue("lost_minutes")), Note: c.FormValue("note"),
	}
	rep := market.WorkReport{ReservationID: r.ID, ReporterID: u.ID, Metric: market.WorkMetric(vals.Metric), Workload: vals.Workload, Note: vals.Note}
	errs := map[string]string{}
	rep.OfferID, _ = strconv.ParseInt(vals.Offer, 10, 64)
	if rep.Metric == market.MetricTokensPerSec {
		rep.LatencyPercentile, _ = strconv.Atoi(vals.Percentile)
	}
	num := func(field, s string, dst *int) {
		n, err := strconv.Atoi(s)
		if err != nil && s != "" {
			errs[field] = "Enter a whole number."
		}
		*dst = n
	}
	num("observed_minutes", vals.Observed, &rep.ObservedMinutes)
	num("lost_minutes", vals.Lost, &rep.LostMinutes)
	if n, err := strconv.ParseInt(vals.Value, 10, 64); err == nil {
		rep.Value = n
	} else {
		errs["value"] = "Enter the measured throughput as a whole number above zero."
	}
	if len(errs) == 0 {
		_, err = h.wf.RecordWorkReport(ctx, rep)
		if err == nil {
			h.setFlash(c, "ok", "Thank you: your measurement now counts in the offer's measured figures.")
			return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/reservations/%d#measured-work", r.ID))
		}
		if market.ErrorCode(err) != market.CodeInvalid {
			return err
		}
		for k, m := range market.FieldErrors(err) {
			errs[k] = m
		}
		if len(errs) == 0 {
			errs["offer"] = market.ErrorMessage(err)
		}
	}
	wv, err := h.workReportView(c, r, vals, errs)
	if err != nil {
		return err
	}
	return render(c, http.StatusUnprocessableEntity, views.WorkReportPage(h.page(c, fmt.Sprintf("Reservation #%d: measured work", r.ID)), fmt.Sprintf("/reservations/%d", r.ID), wv))
}

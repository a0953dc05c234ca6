package web

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
)

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

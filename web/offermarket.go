package web

import (
	"context"
	"fmt"
	"strconv"
	"strings"

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

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
// quote's offers (or, without reports there, on their models), from the
// figures read once for every quote on the page (quotedMeasured).
func quoteMarketNotes(q market.Quote, shifts []market.CarbonShift, measured map[int64]measuredOn) views.QuoteMarketNotes {
	n := views.QuoteMarketNotes{CarbonBasis: "Board power × devices × each hour it runs × that hour's grid intensity."}
	for _, s := range shifts {
		if s.Rank == q.Rank {
			n.CarbonShift = s.Summary()
		}
	}
	for _, p := range q.Pieces {
		if m, ok := measured[p.OfferID]; ok {
			n.Measured = append(n.Measured, measuredFigureLines(m.figures, m.scope, p.PriceCents)...)
		}
	}
	return n
}

// measuredOn is the measured work a quote card shows for an offer: its
// own reports' figures, or its model's across offers when it has none.
type measuredOn struct {
	figures []market.MeasuredFigure
	scope   string
}

// quotedMeasured reads the measured work of every offer in quotes: one
// read for the offers' own reports, and one for each model of those
// without any (before, each piece of each card read its offer's, and then
// its model's, again). An offer whose figures could not be read is left
// out, with a warning: the card is shown without them.
func (h *Handler) quotedMeasured(ctx context.Context, quotes []market.Quote) map[int64]measuredOn {
	var ids []int64
	models := map[int64]string{} // offer → its model, as quoted
	for _, q := range quotes {
		for _, p := range q.Pieces {
			if _, ok := models[p.OfferID]; !ok {
				ids = append(ids, p.OfferID)
				models[p.OfferID] = p.AcceleratorID
			}
		}
	}
	out := map[int64]measuredOn{}
	if len(ids) == 0 {
		return out
	}
	reports, err := h.db.ListWorkReports(ctx, store.WorkReportFilter{OfferIDs: ids})
	if err != nil {
		h.log.Warn("measured work not loaded", "offers", len(ids), "err", err)
		return out
	}
	own := map[int64][]market.WorkReport{}
	for _, r := range reports {
		own[r.OfferID] = append(own[r.OfferID], r)
	}
	byModel := map[string]*measuredOn{}
	for _, id := range ids {
		if rs := own[id]; len(rs) > 0 {
			out[id] = measuredOn{figures: market.AggregateWork(rs), scope: "this offer"}
			continue
		}
		accID := models[id]
		m, ok := byModel[accID]
		if !ok {
			rs, err := h.db.ListWorkReports(ctx, store.WorkReportFilter{AcceleratorID: accID})
			if err != nil {
				h.log.Warn("measured work not loaded", "accelerator", accID, "err", err)
			} else {
				a, _ := market.FindAccelerator(accID)
				m = &measuredOn{figures: market.AggregateWork(rs), scope: "all " + a.Name + " offers"}
			}
			byModel[accID] = m
		}
		if m != nil {
			out[id] = *m
		}
	}
	return out
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

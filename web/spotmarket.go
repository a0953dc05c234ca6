package web

import (
	"bytes"
	"encoding/csv"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/views"
)

// spotClass is one accelerator's spot series beside its on-demand index
// and the first week of its on-demand forward curve, over all regions.
type spotClass struct {
	series           market.SpotSeries
	onDemand         market.IndexPoint // the last published day; zero Day when none
	forward          market.ForwardWeek
	hasForward       bool
	acceleratorLabel string
}

// spotData loads the offer-hour clearings of the query's days (and the
// hours cleared ahead of now), and computes each accelerator's spot
// series (market.SpotIndex) with its comparisons; with a class selected,
// only that class's accelerator.
func (h *Handler) spotData(c echo.Context, q marketQuery) ([]spotClass, []market.SpotHourClearing, error) {
	ctx := c.Request().Context()
	now := h.now()
	from := market.Day(now).AddDate(0, 0, -(q.days - 1))
	rows, err := h.db.ListSpotClearings(ctx, from, now.Add(48*time.Hour))
	if err != nil {
		return nil, nil, err
	}
	var clearings []market.SpotHourClearing
	for _, r := range rows {
		if !q.hasClass || r.AcceleratorID == q.class.AcceleratorID {
			clearings = append(clearings, r.SpotHourClearing)
		}
	}
	series := market.SpotIndex(clearings)
	if len(series) == 0 {
		return nil, clearings, nil
	}
	trades, err := h.db.ListTrades(ctx, from, now)
	if err != nil {
		return nil, nil, err
	}
	lastIndex := map[string]market.IndexPoint{}
	for _, s := range market.DailyIndex(trades) {
		if s.Key.Group == market.AllRegions && !s.Key.Class.Interruptible && len(s.Points) > 0 {
			lastIndex[s.Key.Class.AcceleratorID] = s.Points[len(s.Points)-1]
		}
	}
	offers, pieces, err := h.db.ListForwardMarket(ctx, now)
	if err != nil {
		return nil, nil, err
	}
	week1 := map[string]market.ForwardWeek{}
	for _, s := range market.ForwardCurve(now, offers, pieces) {
		if s.Key.Group == market.AllRegions && !s.Key.Class.Interruptible && len(s.Weeks) > 0 {
			week1[s.Key.Class.AcceleratorID] = s.Weeks[0]
		}
	}
	out := make([]spotClass, 0, len(series))
	for _, s := range series {
		w, ok := week1[s.AcceleratorID]
		out = append(out, spotClass{series: s, onDemand: lastIndex[s.AcceleratorID], forward: w, hasForward: ok,
			acceleratorLabel: spotLabel(s.AcceleratorID)})
	}
	return out, clearings, nil
}

// spotLabel names an accelerator's spot series, e.g. "H100 80GB SXM, spot".
func spotLabel(acceleratorID string) string {
	if a, ok := market.FindAccelerator(acceleratorID); ok {
		return a.Name + ", spot"
	}
	return acceleratorID + ", spot"
}

// spotMarketView formats the spot section of the market page.
func spotMarketView(classes []spotClass, q marketQuery) views.SpotMarketView {
	v := views.SpotMarketView{JSONURL: forwardURL("/market/spot.json", q), CSVURL: forwardURL("/market/spot.csv", q)}
	for _, c := range classes {
		s := c.series
		r := views.SpotMarketRow{Class: c.acceleratorLabel, ClassID: s.AcceleratorID,
			Latest: s.LatestCents.String(), LatestHour: s.LatestHour.Format("2 Jan 15:04") + " UTC",
			DayVWAP: "—", Day: "—", DeviceHours: "—", OnDemand: "—", OnDemandDay: "—", Forward: "—"}
		if n := len(s.Days); n > 0 {
			d := s.Days[n-1]
			r.DayVWAP, r.Day, r.DeviceHours = d.VWAPCents.String(), d.Day.Format("2 Jan"), groupInt(d.DeviceHours)
		}
		if !c.onDemand.Day.IsZero() {
			r.OnDemand, r.OnDemandDay = c.onDemand.IndexCents.String(), c.onDemand.Day.Format("2 Jan")
		}
		if c.hasForward {
			switch {
			case c.forward.Trades > 0:
				r.Forward = c.forward.VWAPCents.String() + " traded"
			case c.forward.AskOffers > 0:
				r.Forward = c.forward.AskMinCents.String() + " ask"
			}
		}
		for _, d := range s.Days {
			r.Days = append(r.Days, views.SpotDayRow{Day: formatDate(d.Day), VWAP: d.VWAPCents.String(), DeviceHours: groupInt(d.DeviceHours),
				Clearings: strconv.Itoa(d.Clearings), Range: d.LowCents.String() + " – " + d.HighCents.String()})
		}
		v.Rows = append(v.Rows, r)
	}
	return v
}

// spotJSON is the spot market as JSON: per class, the latest clearing, the
// daily series and the comparisons; and every offer-hour clearing.
type spotJSON struct {
	Currency    string             `json:"currency"`
	Unit        string             `json:"unit"`
	From        string             `json:"from"`
	Methodology string             `json:"methodology"`
	Classes     []spotClassJSON    `json:"classes"`
	Clearings   []spotClearingJSON `json:"clearings"`
}

type spotClassJSON struct {
	Accelerator        string        `json:"accelerator"`
	Label              string        `json:"label"`
	LatestHour         string        `json:"latest_hour"`
	LatestCents        int64         `json:"latest_cents"`
	LatestDevices      int           `json:"latest_devices"`
	OnDemandIndexCents *int64        `json:"on_demand_index_cents"`
	OnDemandIndexDay   string        `json:"on_demand_index_day,omitempty"`
	ForwardWeekStart   string        `json:"forward_week_start,omitempty"`
	ForwardAskMinCents *int64        `json:"forward_ask_min_cents"`
	ForwardVWAPCents   *int64        `json:"forward_vwap_cents"`
	Days               []spotDayJSON `json:"days"`
}

type spotDayJSON struct {
	Day         string `json:"day"`
	VWAPCents   int64  `json:"vwap_cents"`
	DeviceHours int64  `json:"device_hours"`
	Clearings   int    `json:"clearings"`
	LowCents    int64  `json:"low_cents"`
	HighCents   int64  `json:"high_cents"`
}

type spotClearingJSON struct {
	Hour        string `json:"hour"`
	OfferID     int64  `json:"offer_id"`
	Accelerator string `json:"accelerator"`
	FloorCents  int64  `json:"floor_cents"`
	PriceCents  *int64 `json:"price_cents"`
	Capacity    int    `json:"capacity"`
	DevicesBid  int    `json:"devices_bid"`
	DevicesSold int    `json:"devices_sold"`
}

func (h *Handler) handleSpotJSON(c echo.Context) error {
	q, err := readMarketQuery(c)
	if err != nil {
		return marketError(c, err)
	}
	classes, clearings, err := h.spotData(c, q)
	if err != nil {
		return err
	}
	out := spotJSON{Currency: "USD", Unit: "cents per device-hour", Methodology: "/market/methodology#spot",
		From: market.Day(h.now()).AddDate(0, 0, -(q.days - 1)).Format("2006-01-02"), Classes: []spotClassJSON{}, Clearings: []spotClearingJSON{}}
	for _, cl := range classes {
		s := cl.series
		j := spotClassJSON{Accelerator: s.AcceleratorID, Label: cl.acceleratorLabel, LatestHour: s.LatestHour.Format(time.RFC3339),
			LatestCents: int64(s.LatestCents), LatestDevices: s.LatestDevices, Days: []spotDayJSON{}}
		if !cl.onDemand.Day.IsZero() {
			j.OnDemandIndexCents, j.OnDemandIndexDay = centsPtr(cl.onDemand.IndexCents), cl.onDemand.Day.Format("2006-01-02")
		}
		if cl.hasForward {
			j.ForwardWeekStart = cl.forward.Start.Format("2006-01-02")
			if cl.forward.AskOffers > 0 {
				j.ForwardAskMinCents = centsPtr(cl.forward.AskMinCents)
			}
			if cl.forward.Trades > 0 {
				j.ForwardVWAPCents = centsPtr(cl.forward.VWAPCents)
			}
		}
		for _, d := range s.Days {
			j.Days = append(j.Days, spotDayJSON{Day: d.Day.Format("2006-01-02"), VWAPCents: int64(d.VWAPCents), DeviceHours: d.DeviceHours,
				Clearings: d.Clearings, LowCents: int64(d.LowCents), HighCents: int64(d.HighCents)})
		}
		out.Classes = append(out.Classes, j)
	}
	for _, r := range clearings {
		j := spotClearingJSON{Hour: r.Hour.Format(time.RFC3339), OfferID: r.OfferID, Accelerator: r.AcceleratorID, FloorCents: int64(r.FloorCents),
			Capacity: r.Capacity, DevicesBid: r.DevicesBid, DevicesSold: r.DevicesSold}
		if r.DevicesSold > 0 {
			j.PriceCents = centsPtr(r.PriceCents)
		}
		out.Clearings = append(out.Clearings, j)
	}
	c.Response().Header().Set("Cache-Control", "public, max-age=300")
	return c.JSON(http.StatusOK, out)
}

// handleSpotCSV downloads every offer-hour clearing of the period, one row
// each; the price is empty when nothing sold.
func (h *Handler) handleSpotCSV(c echo.Context) error {
	q, err := readMarketQuery(c)
	if err != nil {
		return marketError(c, err)
	}
	_, clearings, err := h.spotData(c, q)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	_ = w.Write([]string{"hour", "offer_id", "accelerator", "floor_cents", "price_cents", "capacity", "devices_bid", "devices_sold"})
	for _, r := range clearings {
		price := ""
		if r.DevicesSold > 0 {
			price = strconv.FormatInt(int64(r.PriceCents), 10)
		}
		_ = w.Write([]string{r.Hour.Format(time.RFC3339), strconv.FormatInt(r.OfferID, 10), r.AcceleratorID, strconv.FormatInt(int64(r.FloorCents), 10),
			price, strconv.Itoa(r.Capacity), strconv.Itoa(r.DevicesBid), strconv.Itoa(r.DevicesSold)})
	}
	w.Flush()
	c.Response().Header().Set(echo.HeaderContentDisposition, `attachment; filename="gpumarket-spot.csv"`)
	c.Response().Header().Set("Cache-Control", "public, max-age=300")
	return c.Blob(http.StatusOK, "text/csv; charset=utf-8", buf.Bytes())
}

package web

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/views"
)

// Market data defaults: how many days the page and endpoints cover.
const (
	marketDefaultDays = 90
	marketMaxDays     = 366
)

// marketQuery is the market page's and endpoints' filter.
type marketQuery struct {
	class    market.PriceClass
	hasClass bool
	group    string // region group, or market.AllRegions
	days     int
}

// readMarketQuery parses ?class=&region=&days=; unknown values are an
// invalid error naming the field.
func readMarketQuery(c echo.Context) (marketQuery, error) {
	q := marketQuery{group: market.AllRegions, days: marketDefaultDays}
	p := market.Problems{}
	if s := c.QueryParam("class"); s != "" {
		cl, ok := market.ParsePriceClass(s)
		if !ok {
			p.Add("class", "Unknown class: use an accelerator id and :on-demand or :interruptible, e.g. nvidia-h100-80gb-sxm:on-demand.")
		}
		q.class, q.hasClass = cl, ok
	}
	if s := c.QueryParam("region"); s != "" && s != "all" && s != market.AllRegions {
		ok := false
		for _, g := range market.RegionGroups() {
			ok = ok || g == s
		}
		if !ok {
			p.Add("region", "Unknown region group: use all or one of the groups on the market page.")
		}
		q.group = s
	}
	if s := c.QueryParam("days"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > marketMaxDays {
			p.Add("days", fmt.Sprintf("Days must be a whole number from 1 to %d.", marketMaxDays))
		}
		q.days = n
	}
	return q, p.Err()
}

// marketData loads the trades of the query's days and the listed offers'
// asks, and computes the index and ask statistics for the query's region
// group (and class, when set).
func (h *Handler) marketData(c echo.Context, q marketQuery) ([]market.Series, []market.AskStats, time.Time, error) {
	ctx := c.Request().Context()
	now := h.now()
	from := market.Day(now).AddDate(0, 0, -(q.days - 1))
	trades, err := h.db.ListTrades(ctx, from, now)
	if err != nil {
		return nil, nil, from, err
	}
	listings, err := h.db.ListAllListedOffers(ctx, now)
	if err != nil {
		return nil, nil, from, err
	}
	var asks []market.Ask
	for _, l := range listings {
		asks = append(asks, market.AsksFromOffer(l.Offer)...)
	}
	keep := func(k market.SeriesKey) bool {
		return k.Group == q.group && (!q.hasClass || k.Class == q.class)
	}
	var series []market.Series
	for _, s := range market.DailyIndex(trades) {
		if keep(s.Key) {
			series = append(series, s)
		}
	}
	var stats []market.AskStats
	for _, s := range market.AskStatistics(asks) {
		if keep(s.Key) {
			stats = append(stats, s)
		}
	}
	return series, stats, from, nil
}

func (h *Handler) handleMarket(c echo.Context) error {
	q, qerr := readMarketQuery(c)
	if qerr != nil {
		q = marketQuery{group: market.AllRegions, days: marketDefaultDays}
	}
	series, stats, from, err := h.marketData(c, q)
	if err != nil {
		return err
	}
	curves, err := h.forwardData(c, q)
	if err != nil {
		return err
	}
	spot, _, err := h.spotData(c, q)
	if err != nil {
		return err
	}
	v := views.MarketView{Spot: spotMarketView(spot, q), Forward: forwardViews(curves, q.hasClass), ForwardFrom: formatDate(market.WeekStart(h.now())),
		ForwardJSONURL: forwardURL("/market/forward.json", q), ForwardCSVURL: forwardURL("/market/forward.csv", q),
		Days: strconv.Itoa(q.days), Region: q.group, From: formatDate(from), To: formatDate(h.now()),
		JSONURL: "/market/index.json?" + marketLinkQuery(q), CSVURL: "/market/index.csv?" + marketLinkQuery(q), Threshold: indexThreshold()}
	if qerr != nil {
		v.Error = fieldsMessage(qerr)
	}
	if q.hasClass {
		v.Class = q.class.ID()
	}
	v.Regions = []views.Option{{Value: "all", Label: market.AllRegions}}
	for _, g := range market.RegionGroups() {
		v.Regions = append(v.Regions, views.Option{Value: g, Label: g})
	}
	v.Classes = []views.Option{{Value: "", Label: "Every class that traded"}}
	for _, a := range market.Accelerators() {
		for _, intr := range []bool{false, true} {
			cl := market.PriceClass{AcceleratorID: a.ID, Interruptible: intr}
			v.Classes = append(v.Classes, views.Option{Value: cl.ID(), Label: cl.Label()})
		}
	}
	askBy := map[market.PriceClass]market.AskStats{}
	for _, s := range stats {
		askBy[s.Key.Class] = s
	}
	traded := map[market.PriceClass]bool{}
	for _, s := range series {
		traded[s.Key.Class] = true
		row := summaryRow(s, askBy[s.Key.Class], q)
		v.Summary = append(v.Summary, row)
		v.Charts = append(v.Charts, indexChart(s, from, q.days, row))
	}
	for _, s := range stats {
		if !traded[s.Key.Class] {
			v.Summary = append(v.Summary, summaryRow(market.Series{Key: s.Key}, s, q))
		}
	}
	status := http.StatusOK
	if qerr != nil {
		status = http.StatusUnprocessableEntity
	}
	return render(c, status, views.Market(h.page(c, "Market"), v))
}

func marketLinkQuery(q marketQuery) string {
	v := make([]string, 0, 3)
	if q.hasClass {
		v = append(v, "class="+q.class.ID())
	}
	if q.group != market.AllRegions {
		v = append(v, "region="+url.QueryEscape(q.group))
	}
	v = append(v, "days="+strconv.Itoa(q.days))
	out := ""
	for i, s := range v {
		if i > 0 {
			out += "&"
		}
		out += s
	}
	return out
}

// forwardURL links path with the query's class and region group; the
// forward curve takes no days.
func forwardURL(path string, q marketQuery) string {
	v := url.Values{}
	if q.hasClass {
		v.Set("class", q.class.ID())
	}
	if q.group != market.AllRegions {
		v.Set("region", q.group)
	}
	if len(v) == 0 {
		return path
	}
	return path + "?" + v.Encode()
}

func summaryRow(s market.Series, a market.AskStats, q marketQuery) views.MarketSummaryRow {
	r := views.MarketSummaryRow{Class: s.Key.Class.Label(), ClassID: s.Key.Class.ID(), Last: "—", LastDay: "—", Volume: "—", Trades: "—",
		AskMin: "—", AskMedian: "—", AskP90: "—", Offers: strconv.Itoa(a.Offers),
		URL: "/market?" + marketLinkQuery(marketQuery{class: s.Key.Class, hasClass: true, group: q.group, days: q.days})}
	var vol int64
	trades := 0
	for _, p := range s.Points {
		vol += p.VolumeDeviceSeconds
		trades += p.Trades
	}
	if n := len(s.Points); n > 0 {
		last := s.Points[n-1]
		r.Last, r.LastDay = last.IndexCents.String(), formatDate(last.Day)
		r.Volume = groupInt((vol + 1800) / 3600)
		r.Trades = strconv.Itoa(trades)
	}
	if a.Offers > 0 {
		r.AskMin, r.AskMedian, r.AskP90 = a.MinCents.String(), a.MedianCents.String(), a.P90Cents.String()
	}
	return r
}

func groupInt(n int64) string {
	s := strconv.FormatInt(n, 10)
	out := make([]byte, 0, len(s)+len(s)/3)
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// Chart geometry, in SVG user units.
const (
	chartW, chartH        = 480, 270
	chartLeft, chartRight = 60, 12
	chartTop              = 12
	chartPriceH, chartGap = 150, 12
	chartVolumeH          = 64
	chartVolumeTop        = chartTop + chartPriceH + chartGap
	chartAxisY            = chartVolumeTop + chartVolumeH
	chartPlotW            = chartW - chartLeft - chartRight
)

// indexChart lays out one series as an SVG chart: the daily index as a
// line (price scale from the lowest to the highest index, padded) and
// the day's volume as bars below, over the query's days.
func indexChart(s market.Series, from time.Time, days int, row views.MarketSummaryRow) views.ChartView {
	cv := views.ChartView{ID: "chart-" + s.Key.Class.ID(), Title: s.Key.Class.Label() + " · " + s.Key.Group,
		Width: strconv.Itoa(chartW), Height: strconv.Itoa(chartH), Left: strconv.Itoa(chartLeft), Right: strconv.Itoa(chartW - chartRight),
		AxisY: strconv.Itoa(chartAxisY), VolumeTop: strconv.Itoa(chartVolumeTop), Class: s.Key.Class.ID()}
	if len(s.Points) == 0 {
		return cv
	}
	lo, hi := s.Points[0].IndexCents, s.Points[0].IndexCents
	var maxVol int64
	for _, p := range s.Points {
		lo, hi = min(lo, p.IndexCents), max(hi, p.IndexCents)
		maxVol = max(maxVol, p.VolumeDeviceSeconds)
	}
	pad := max((hi-lo)/10, 1)
	lo, hi = max(lo-pad, 0), hi+pad
	slot := float64(chartPlotW) / float64(days)
	x := func(day time.Time) float64 {
		i := int(day.Sub(from) / (24 * time.Hour))
		return float64(chartLeft) + (float64(i)+0.5)*slot
	}
	y := func(c market.Cents) float64 {
		return float64(chartTop) + float64(hi-c)*float64(chartPriceH)/float64(hi-lo)
	}
	var path bytes.Buffer
	for i, p := range s.Points {
		px, py := x(p.Day), y(p.IndexCents)
		if i == 0 {
			fmt.Fprintf(&path, "M%.1f %.1f", px, py)
		} else {
			fmt.Fprintf(&path, " L%.1f %.1f", px, py)
		}
		bh := float64(p.VolumeDeviceSeconds) * chartVolumeH / float64(maxVol)
		cv.Points = append(cv.Points, views.ChartPoint{
			X: ftoa(px), Y: ftoa(py), Day: p.Day.Format("2006-01-02"), Index: p.IndexCents.String(), IndexCents: strconv.FormatInt(int64(p.IndexCents), 10),
			Volume: groupInt(p.VolumeDeviceHours()), Trades: strconv.Itoa(p.Trades), Low: p.LowCents.String(), High: p.HighCents.String(),
			BarX: ftoa(px - slot*0.4), BarY: ftoa(float64(chartAxisY) - bh), BarW: ftoa(slot * 0.8), BarH: ftoa(bh),
		})
	}
	cv.Path = path.String()
	for i := 0; i <= 4; i++ {
		c := lo + (hi-lo)*market.Cents(i)/4
		cv.YTicks = append(cv.YTicks, views.ChartTick{Pos: ftoa(y(c)), Label: c.String()})
	}
	cv.VolumeLabel = groupInt((maxVol+1800)/3600) + " device-h"
	for _, d := range []int{0, days / 2, days - 1} {
		day := from.AddDate(0, 0, d)
		cv.XTicks = append(cv.XTicks, views.ChartTick{Pos: ftoa(x(day)), Label: day.Format("2 Jan")})
	}
	first, last := s.Points[0], s.Points[len(s.Points)-1]
	cv.Desc = fmt.Sprintf("Daily volume-weighted index for %s from %s to %s: %s per device-hour on %s, %s on %s; lowest %s, highest %s; %s device-hours in %s trades. The table below has every point.",
		cv.Title, formatDate(first.Day), formatDate(last.Day), first.IndexCents, formatDate(first.Day), last.IndexCents, formatDate(last.Day),
		cv.YTicks[0].Label, cv.YTicks[4].Label, row.Volume, row.Trades)
	return cv
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }

// indexJSON is one series of the index as JSON.
type indexJSON struct {
	Class         string           `json:"class"`
	ClassLabel    string           `json:"class_label"`
	Accelerator   string           `json:"accelerator"`
	Interruptible bool             `json:"interruptible"`
	RegionGroup   string           `json:"region_group"`
	Points        []indexPointJSON `json:"points"`
}

type indexPointJSON struct {
	Date                string `json:"date"`
	IndexCents          int64  `json:"index_cents"`
	VolumeDeviceHours   int64  `json:"volume_device_hours"`
	VolumeDeviceSeconds int64  `json:"volume_device_seconds"`
	Trades              int    `json:"trades"`
	LowCents            int64  `json:"low_cents"`
	HighCents           int64  `json:"high_cents"`
}

type askJSON struct {
	Class       string `json:"class"`
	RegionGroup string `json:"region_group"`
	Offers      int    `json:"offers"`
	MinCents    int64  `json:"min_cents"`
	MedianCents int64  `json:"median_cents"`
	P90Cents    int64  `json:"p90_cents"`
}

type marketJSON struct {
	Currency    string      `json:"currency"`
	Unit        string      `json:"unit"`
	From        string      `json:"from"`
	To          string      `json:"to"`
	Methodology string      `json:"methodology"`
	Series      []indexJSON `json:"series"`
	Asks        []askJSON   `json:"asks"`
}

func marketError(c echo.Context, err error) error {
	return c.JSON(http.StatusBadRequest, apiErrorBody{Error: apiError{Code: market.CodeInvalid, Message: market.ErrorMessage(err),
		Fields: market.FieldErrors(err), RequestID: c.Response().Header().Get(echo.HeaderXRequestID)}})
}

func (h *Handler) handleMarketJSON(c echo.Context) error {
	q, err := readMarketQuery(c)
	if err != nil {
		return marketError(c, err)
	}
	series, stats, from, err := h.marketData(c, q)
	if err != nil {
		return err
	}
	out := marketJSON{Currency: "USD", Unit: "cents per device-hour", From: from.Format("2006-01-02"), To: market.Day(h.now()).Format("2006-01-02"),
		Methodology: "/market/methodology", Series: []indexJSON{}, Asks: []askJSON{}}
	for _, s := range series {
		sj := indexJSON{Class: s.Key.Class.ID(), ClassLabel: s.Key.Class.Label(), Accelerator: s.Key.Class.AcceleratorID,
			Interruptible: s.Key.Class.Interruptible, RegionGroup: s.Key.Group}
		for _, p := range s.Points {
			sj.Points = append(sj.Points, indexPointJSON{Date: p.Day.Format("2006-01-02"), IndexCents: int64(p.IndexCents),
				VolumeDeviceHours: p.VolumeDeviceHours(), VolumeDeviceSeconds: p.VolumeDeviceSeconds, Trades: p.Trades,
				LowCents: int64(p.LowCents), HighCents: int64(p.HighCents)})
		}
		out.Series = append(out.Series, sj)
	}
	for _, a := range stats {
		out.Asks = append(out.Asks, askJSON{Class: a.Key.Class.ID(), RegionGroup: a.Key.Group, Offers: a.Offers,
			MinCents: int64(a.MinCents), MedianCents: int64(a.MedianCents), P90Cents: int64(a.P90Cents)})
	}
	c.Response().Header().Set("Cache-Control", "public, max-age=300")
	return c.JSON(http.StatusOK, out)
}

func (h *Handler) handleMarketCSV(c echo.Context) error {
	q, err := readMarketQuery(c)
	if err != nil {
		return marketError(c, err)
	}
	series, _, _, err := h.marketData(c, q)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	_ = w.Write([]string{"date", "class", "class_label", "region_group", "index_cents", "volume_device_hours", "volume_device_seconds", "trades", "low_cents", "high_cents"})
	for _, s := range series {
		for _, p := range s.Points {
			_ = w.Write([]string{p.Day.Format("2006-01-02"), s.Key.Class.ID(), s.Key.Class.Label(), s.Key.Group,
				strconv.FormatInt(int64(p.IndexCents), 10), strconv.FormatInt(p.VolumeDeviceHours(), 10),
				strconv.FormatInt(p.VolumeDeviceSeconds, 10), strconv.Itoa(p.Trades),
				strconv.FormatInt(int64(p.LowCents), 10), strconv.FormatInt(int64(p.HighCents), 10)})
		}
	}
	w.Flush()
	c.Response().Header().Set(echo.HeaderContentDisposition, `attachment; filename="gpumarket-index.csv"`)
	c.Response().Header().Set("Cache-Control", "public, max-age=300")
	return c.Blob(http.StatusOK, "text/csv; charset=utf-8", buf.Bytes())
}

// indexThreshold says when the index publishes a day's figure.
func indexThreshold() string {
	return fmt.Sprintf("at least %d trades from at least %d buyers and %d providers",
		market.IndexMinTrades, market.IndexMinBuyers, market.IndexMinProviders)
}

func (h *Handler) handleMethodology(c echo.Context) error {
	v := views.MethodologyView{Threshold: indexThreshold()}
	for _, r := range market.Regions() {
		p, src, _ := market.RegionCarbonProfile(r.ID)
		row := views.ProfileRow{Region: r.Name, Source: src, Mean: strconv.Itoa(p.Mean())}
		lo, hi := p[0], p[0]
		for _, g := range p {
			lo, hi = min(lo, g), max(hi, g)
		}
		row.Hours = strings.ReplaceAll(p.String(), ",", " ")
		row.Range = fmt.Sprintf("%d–%d", lo, hi)
		v.Profiles = append(v.Profiles, row)
	}
	return render(c, http.StatusOK, views.Methodology(h.page(c, "Market methodology"), v))
}

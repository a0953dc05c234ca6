package web

import (
	"bytes"
	"encoding/csv"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/views"
)

// forwardData loads the listed offers and the pieces starting in the
// forward curve's weeks, and computes the curves for the query's region
// group (and class, when set).
func (h *Handler) forwardData(c echo.Context, q marketQuery) ([]market.ForwardSeries, error) {
	now := h.now()
	offers, trades, err := h.db.ListForwardMarket(c.Request().Context(), now)
	if err != nil {
		return nil, err
	}
	var out []market.ForwardSeries
	for _, s := range market.ForwardCurve(now, offers, trades) {
		if s.Key.Group == q.group && (!q.hasClass || s.Key.Class == q.class) {
			out = append(out, s)
		}
	}
	return out, nil
}

// forwardViews formats the curves for the market page; a dash stands for
// no ask or no published trade.
// Each curve's table is open when one class is selected; otherwise its
// summary line gives the lowest ask and the published trades.
func forwardViews(curves []market.ForwardSeries, open bool) []views.ForwardCurveView {
	var out []views.ForwardCurveView
	for _, s := range curves {
		cv := views.ForwardCurveView{ID: "forward-" + s.Key.Class.ID(), ClassID: s.Key.Class.ID(), Title: s.Key.Class.Label() + " · " + s.Key.Group, Open: open}
		var lowest market.Cents
		trades, weeks := 0, 0
		for _, w := range s.Weeks {
			if w.AskOffers > 0 && (lowest == 0 || w.AskMinCents < lowest) {
				lowest = w.AskMinCents
			}
			if w.Trades > 0 {
				trades, weeks = trades+w.Trades, weeks+1
			}
		}
		cv.Summary = "no asks"
		if lowest > 0 {
			cv.Summary = "asks from " + lowest.String()
		}
		switch {
		case trades == 0:
			cv.Summary += " · no published trades"
		case weeks == 1:
			cv.Summary += " · " + strconv.Itoa(trades) + " trades in 1 week"
		default:
			cv.Summary += " · " + strconv.Itoa(trades) + " trades in " + strconv.Itoa(weeks) + " weeks"
		}
		for _, w := range s.Weeks {
			r := views.ForwardWeekRow{WeekStart: w.Start.Format("2006-01-02"), Week: w.Start.Format("2 Jan 2006"),
				AskMin: "—", Offers: "—", Devices: "—", VWAP: "—", Range: "—", Volume: "—", Trades: "—"}
			if w.AskOffers > 0 {
				r.AskMin, r.Offers, r.Devices = w.AskMinCents.String(), strconv.Itoa(w.AskOffers), groupInt(int64(w.AskDevices))
			}
			if w.Trades > 0 {
				r.VWAP, r.Range = w.VWAPCents.String(), w.LowCents.String()+" – "+w.HighCents.String()
				r.Volume, r.Trades = groupInt(w.VolumeDeviceHours()), strconv.Itoa(w.Trades)
			}
			cv.Weeks = append(cv.Weeks, r)
		}
		out = append(out, cv)
	}
	return out
}

// forwardJSON is one forward curve as JSON.
type forwardJSON struct {
	Class         string            `json:"class"`
	ClassLabel    string            `json:"class_label"`
	Accelerator   string            `json:"accelerator"`
	Interruptible bool              `json:"interruptible"`
	RegionGroup   string            `json:"region_group"`
	Weeks         []forwardWeekJSON `json:"weeks"`
}

// forwardWeekJSON is one start week; prices are null when nothing is
// asked or no trade is published.
type forwardWeekJSON struct {
	WeekStart           string `json:"week_start"`
	AskOffers           int    `json:"ask_offers"`
	AskDevices          int    `json:"ask_devices"`
	AskMinCents         *int64 `json:"ask_min_cents"`
	Trades              int    `json:"trades"`
	VWAPCents           *int64 `json:"vwap_cents"`
	LowCents            *int64 `json:"low_cents"`
	HighCents           *int64 `json:"high_cents"`
	VolumeDeviceHours   int64  `json:"volume_device_hours"`
	VolumeDeviceSeconds int64  `json:"volume_device_seconds"`
}

type forwardMarketJSON struct {
	Currency    string        `json:"currency"`
	Unit        string        `json:"unit"`
	Settlement  string        `json:"settlement"`
	From        string        `json:"from"`
	Weeks       int           `json:"weeks"`
	Methodology string        `json:"methodology"`
	Curves      []forwardJSON `json:"curves"`
}

func centsPtr(c market.Cents) *int64 {
	v := int64(c)
	return &v
}

func (h *Handler) handleForwardJSON(c echo.Context) error {
	q, err := readMarketQuery(c)
	if err != nil {
		return marketError(c, err)
	}
	curves, err := h.forwardData(c, q)
	if err != nil {
		return err
	}
	out := forwardMarketJSON{Currency: "USD", Unit: "cents per device-hour", Settlement: "physical",
		From: market.WeekStart(h.now()).Format("2006-01-02"), Weeks: market.ForwardWeeks,
		Methodology: "/market/methodology#forward", Curves: []forwardJSON{}}
	for _, s := range curves {
		fj := forwardJSON{Class: s.Key.Class.ID(), ClassLabel: s.Key.Class.Label(), Accelerator: s.Key.Class.AcceleratorID,
			Interruptible: s.Key.Class.Interruptible, RegionGroup: s.Key.Group}
		for _, w := range s.Weeks {
			wj := forwardWeekJSON{WeekStart: w.Start.Format("2006-01-02"), AskOffers: w.AskOffers, AskDevices: w.AskDevices,
				Trades: w.Trades, VolumeDeviceHours: w.VolumeDeviceHours(), VolumeDeviceSeconds: w.VolumeDeviceSeconds}
			if w.AskOffers > 0 {
				wj.AskMinCents = centsPtr(w.AskMinCents)
			}
			if w.Trades > 0 {
				wj.VWAPCents, wj.LowCents, wj.HighCents = centsPtr(w.VWAPCents), centsPtr(w.LowCents), centsPtr(w.HighCents)
			}
			fj.Weeks = append(fj.Weeks, wj)
		}
		out.Curves = append(out.Curves, fj)
	}
	c.Response().Header().Set("Cache-Control", "public, max-age=300")
	return c.JSON(http.StatusOK, out)
}

func (h *Handler) handleForwardCSV(c echo.Context) error {
	q, err := readMarketQuery(c)
	if err != nil {
		return marketError(c, err)
	}
	curves, err := h.forwardData(c, q)
	if err != nil {
		return err
	}
	cents := func(ok bool, v market.Cents) string {
		if !ok {
			return ""
		}
		return strconv.FormatInt(int64(v), 10)
	}
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	_ = w.Write([]string{"week_start", "class", "class_label", "region_group", "ask_offers", "ask_devices", "ask_min_cents",
		"trades", "vwap_cents", "low_cents", "high_cents", "volume_device_hours", "volume_device_seconds"})
	for _, s := range curves {
		for _, wk := range s.Weeks {
			asked, traded := wk.AskOffers > 0, wk.Trades > 0
			_ = w.Write([]string{wk.Start.Format("2006-01-02"), s.Key.Class.ID(), s.Key.Class.Label(), s.Key.Group,
				strconv.Itoa(wk.AskOffers), strconv.Itoa(wk.AskDevices), cents(asked, wk.AskMinCents),
				strconv.Itoa(wk.Trades), cents(traded, wk.VWAPCents), cents(traded, wk.LowCents), cents(traded, wk.HighCents),
				strconv.FormatInt(wk.VolumeDeviceHours(), 10), strconv.FormatInt(wk.VolumeDeviceSeconds, 10)})
		}
	}
	w.Flush()
	c.Response().Header().Set(echo.HeaderContentDisposition, `attachment; filename="gpumarket-forward.csv"`)
	c.Response().Header().Set("Cache-Control", "public, max-age=300")
	return c.Blob(http.StatusOK, "text/csv; charset=utf-8", buf.Bytes())
}

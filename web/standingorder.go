package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
)

// orderInput is the standing order form as typed.
type orderInput struct {
	Request, LimitKind, Limit, FillBy, OnFill string
}

func readOrderForm(c echo.Context) orderInput {
	return orderInput{
		Request:   c.FormValue("request"),
		LimitKind: strings.TrimSpace(c.FormValue("limit_kind")),
		Limit:     strings.TrimSpace(c.FormValue("limit")),
		FillBy:    strings.TrimSpace(c.FormValue("fill_by")),
		OnFill:    strings.TrimSpace(c.FormValue("on_fill")),
	}
}

// order parses the form into an order of buyerID; problems parsing a field
// are returned by field name (market's rules are checked by the store).
func (in orderInput) order(buyerID int64) (market.StandingOrder, map[string]string) {
	o := market.StandingOrder{BuyerID: buyerID, LimitKind: market.OrderLimitKind(in.LimitKind), OnFill: market.OnFill(in.OnFill)}
	errs := map[string]string{}
	req, err := market.DecodeRequestJSON([]byte(in.Request))
	if err != nil {
		errs["request"] = "The request could not be read; get quotes for it again in the request builder."
	}
	o.Request = req
	if in.Limit == "" {
		errs["limit"] = "Enter a limit in US dollars, e.g. 2.10."
	} else if c, err := market.ParseCents(in.Limit); err != nil {
		errs["limit"] = "Enter the limit in US dollars, e.g. 2.10."
	} else {
		o.LimitCents = c
	}
	if in.FillBy != "" {
		t, err := time.ParseInLocation(formTimeLayout, in.FillBy, time.UTC)
		if err != nil {
			errs["fill_by"] = "Enter a date and time, e.g. 2026-03-09T12:00."
		}
		o.FillBy = t
	}
	return o, errs
}

// orderFormView is the standing order form for req with the values typed
// (defaults when in is empty), its problems and a message.
func (h *Handler) orderFormView(c echo.Context, req market.Request, in orderInput, best *market.Quote, errs map[string]string, message string) (views.StandingOrderFormView, error) {
	doc, err := market.EncodeRequestJSON(req)
	if err != nil {
		return views.StandingOrderFormView{}, err
	}
	now := h.now()
	if in.LimitKind == "" {
		in.LimitKind = string(market.LimitPerRefDeviceHour)
	}
	if in.OnFill == "" {
		in.OnFill = string(market.FillHold)
	}
	if in.FillBy == "" {
		in.FillBy = defaultFillBy(req, now).Format(formTimeLayout)
	}
	v := views.StandingOrderFormView{
		Action: "/orders", CSRF: h.csrfToken(c), RequestJSON: string(doc), Request: requestSummary(req),
		RequestURL: "/requests?" + requestQuery(requestValues(req)),
		LimitKind:  in.LimitKind, Limit: in.Limit, FillBy: in.FillBy, OnFill: in.OnFill, Errors: errs, Message: message,
		AccountURL: "/account", Rules: market.StandingOrderRules(),
	}
	if best != nil {
		v.Best = fmt.Sprintf("The best quote now costs %s in total", best.Cost.Total)
		if best.CentsPerRefDeviceHour > 0 {
			v.Best += fmt.Sprintf(", %s per reference device-hour", best.CentsPerRefDeviceHour)
		}
		v.Best += ": a limit below that waits for cheaper capacity."
	}
	if u := currentUser(c); u != nil {
		if m, err := h.db.DefaultPaymentMethod(c.Request().Context(), u.ID); err == nil {
			v.SavedMethod = m.Label
		} else if market.ErrorCode(err) != market.CodeNotFound {
			return v, err
		}
	}
	return v, nil
}

// defaultFillBy suggests a fill-by date: a week ahead, or sooner when the
// request's deadline leaves less time (the job's hours before it), and at
// least an hour ahead.
func defaultFillBy(req market.Request, now time.Time) time.Time {
	t := now.Add(7 * 24 * time.Hour).Truncate(time.Hour)
	if d := req.Constraints.Deadline; !d.IsZero() {
		if last := d.Add(-time.Duration(req.Workload.Hours) * time.Hour).Truncate(time.Hour); last.Before(t) {
			t = last
		}
	}
	if soonest := now.Add(market.MinFillByAhead).Truncate(time.Hour).Add(time.Hour); t.Before(soonest) {
		t = soonest
	}
	return t
}

// requestSummary says what a request asks for in a line.
func requestSummary(r market.Request) string {
	w, c := r.Workload, r.Constraints
	var models []string
	for _, id := range c.AcceleratorIDs {
		if a, ok := market.FindAccelerator(id); ok {
			models = append(models, a.Name)
		}
	}
	if len(models) == 0 {
		models = c.Families
	}
	what := "any accelerator"
	switch {
	case len(models) > 0:
		what = strings.Join(models, " or ")
	case len(c.OfferIDs) > 0:
		ids := make([]string, len(c.OfferIDs))
		for i, id := range c.OfferIDs {
			ids[i] = "#" + strconv.FormatInt(id, 10)
		}
		what = "offer " + strings.Join(ids, " or ")
	}
	s := fmt.Sprintf("%d × %s, %s", w.Devices, what, w.Kind)
	switch {
	case w.Hours > 0:
		s += ", " + plural(w.Hours, "hour")
	case w.WorkDeviceHours > 0:
		s += fmt.Sprintf(", %d device-hours of work", w.WorkDeviceHours)
	}
	if !c.EarliestStart.IsZero() {
		s += ", from " + formatTime(c.EarliestStart)
	}
	if !c.Deadline.IsZero() {
		s += ", done by " + formatTime(c.Deadline)
	}
	if len(c.Countries) > 0 {
		s += ", in " + strings.Join(c.Countries, ", ")
	}
	return s
}

// handleOrderCreate places a standing order from the form under the
// quotes: 422 with the form and a message by each bad field, 409 with the
// reason when the rules refuse it, else to the list with what happened.
func (h *Handler) handleOrderCreate(c echo.Context) error {
	u := currentUser(c)
	in := readOrderForm(c)
	o, errs := in.order(u.ID)
	if errs["request"] != "" {
		return market.Errorf(market.CodeInvalid, "%s", errs["request"])
	}
	var placed market.StandingOrder
	var err error
	if len(errs) > 0 {
		// Report the other fields' problems with the parse problems.
		for k, msg := range market.FieldErrors(market.ValidateStandingOrder(&o, h.now())) {
			if _, ok := errs[k]; !ok {
				errs[k] = msg
			}
		}
		err = &market.Error{Code: market.CodeInvalid, Message: "Please correct the highlighted fields.", Fields: errs}
	} else {
		placed, err = h.wf.PlaceStandingOrder(c.Request().Context(), o)
	}
	if err != nil {
		switch market.ErrorCode(err) {
		case market.CodeInvalid:
			v, verr := h.orderFormView(c, o.Request, in, nil, market.FieldErrors(err), "")
			if verr != nil {
				return verr
			}
			if len(v.Errors) == 0 {
				v.Message = market.ErrorMessage(err)
			}
			return render(c, http.StatusUnprocessableEntity, views.StandingOrderNew(h.page(c, "Place a standing order"), v))
		case market.CodeConflict:
			v, verr := h.orderFormView(c, o.Request, in, nil, nil, market.ErrorMessage(err))
			if verr != nil {
				return verr
			}
			return render(c, http.StatusConflict, views.StandingOrderNew(h.page(c, "Place a standing order"), v))
		}
		return err
	}
	if placed.State == market.OrderFilled {
		h.setFlash(c, "ok", fmt.Sprintf("Standing order #%d filled at once: reservation #%d.", placed.ID, placed.ReservationID))
	} else {
		h.setFlash(c, "ok", fmt.Sprintf("Standing order #%d placed. It fills by itself when a quote within %s appears, until %s.",
			placed.ID, placed.LimitText(), formatTime(placed.FillBy)))
	}
	return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/orders#order-%d", placed.ID))
}

// handleOrders lists the buyer's standing orders.
func (h *Handler) handleOrders(c echo.Context) error {
	u := currentUser(c)
	ctx := c.Request().Context()
	now := h.now()
	rows, err := h.db.ListStandingOrders(ctx, u.ID)
	if err != nil {
		return err
	}
	v := views.StandingOrdersView{Rules: market.StandingOrderRules(), BuilderURL: "/requests"}
	open := 0
	for _, r := range rows {
		if r.State == market.OrderOpen {
			open++
		}
		v.Rows = append(v.Rows, orderRow(r))
	}
	v.Open = fmt.Sprintf("%d of at most %d open", open, market.MaxOpenStandingOrders)
	until, blocked, err := h.db.StandingOrderBlock(ctx, u.ID, now)
	if err != nil {
		return err
	}
	if blocked {
		v.Blocked = fmt.Sprintf("%d of your filled orders lapsed unpaid within %d days: you can place standing orders again from %s.",
			market.LapsesBeforeBlock, int(market.LapseWindow/(24*time.Hour)), formatTime(until))
	}
	return render(c, http.StatusOK, views.StandingOrders(h.page(c, "My standing orders"), v))
}

func orderRow(r store.StandingOrderRow) views.StandingOrderRow {
	id := strconv.FormatInt(r.ID, 10)
	row := views.StandingOrderRow{
		ID: id, Anchor: "order-" + id, Request: requestSummary(r.Request),
		RequestURL: "/requests?" + requestQuery(requestValues(r.Request)),
		Limit:      r.LimitText(), FillBy: formatTime(r.FillBy), OnFill: r.OnFill.Text(), Placed: formatTime(r.CreatedAt),
		State: string(r.State), StateLabel: r.State.Label(), Note: r.Note,
	}
	if r.Lapsed() {
		row.State, row.StateLabel = "lapsed", "Lapsed (unpaid)"
	}
	if r.ReservationID != 0 {
		row.ReservationURL = fmt.Sprintf("/reservations/%d", r.ReservationID)
		row.Reservation = fmt.Sprintf("Reservation #%d (%s)", r.ReservationID, r.ReservationState.Label())
	}
	if r.State == market.OrderOpen {
		row.CancelURL = fmt.Sprintf("/orders/%d/cancel", r.ID)
	}
	return row
}

// handleOrderCancel cancels the buyer's own open order.
func (h *Handler) handleOrderCancel(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	o, err := h.wf.CancelStandingOrder(c.Request().Context(), currentUser(c).ID, id)
	if market.ErrorCode(err) == market.CodeConflict {
		h.setFlash(c, "error", market.ErrorMessage(err))
		return c.Redirect(http.StatusSeeOther, "/orders")
	}
	if err != nil {
		return err
	}
	h.setFlash(c, "ok", fmt.Sprintf("Standing order #%d cancelled. Nothing was booked.", o.ID))
	return c.Redirect(http.StatusSeeOther, "/orders")
}

// apiOrderBody is POST /api/v1/orders: the portable request (as for
// quotes), the limit in cents, the fill-by time (RFC 3339) and the
// on-fill choice ("hold" or "pay").
type apiOrderBody struct {
	Request    json.RawMessage `json:"request"`
	LimitKind  string          `json:"limit_kind"`
	LimitCents int64           `json:"limit_cents"`
	FillBy     time.Time       `json:"fill_by"`
	OnFill     string          `json:"on_fill"`
}

// apiOrder is a standing order in the API.
type apiOrder struct {
	ID            int64           `json:"id"`
	State         string          `json:"state"` // open, filled, expired, cancelled
	Lapsed        bool            `json:"lapsed"`
	LimitKind     string          `json:"limit_kind"`
	LimitCents    int64           `json:"limit_cents"`
	FillBy        time.Time       `json:"fill_by"`
	OnFill        string          `json:"on_fill"`
	ReservationID int64           `json:"reservation_id,omitempty"`
	Note          string          `json:"note,omitempty"`
	CreatedAt     time.Time       `json:"created_at"`
	Request       json.RawMessage `json:"request"`
}

func toAPIOrder(o store.StandingOrderRow) apiOrder {
	return apiOrder{ID: o.ID, State: string(o.State), Lapsed: o.Lapsed(), LimitKind: string(o.LimitKind), LimitCents: int64(o.LimitCents),
		FillBy: o.FillBy, OnFill: string(o.OnFill), ReservationID: o.ReservationID, Note: o.Note, CreatedAt: o.CreatedAt,
		Request: json.RawMessage(o.RequestJSON)}
}

func (h *Handler) handleAPIOrderCreate(c echo.Context) error {
	var body apiOrderBody
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	req, err := market.DecodeRequestJSON(body.Request)
	if err != nil {
		return err
	}
	u := currentUser(c)
	placed, err := h.wf.PlaceStandingOrder(c.Request().Context(), market.StandingOrder{BuyerID: u.ID, Request: req,
		LimitKind: market.OrderLimitKind(body.LimitKind), LimitCents: market.Cents(body.LimitCents), FillBy: body.FillBy.UTC(),
		OnFill: market.OnFill(body.OnFill)})
	if err != nil {
		return err
	}
	row, err := h.db.FindStandingOrder(c.Request().Context(), u.ID, placed.ID)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusCreated, toAPIOrder(row))
}

func (h *Handler) handleAPIOrders(c echo.Context) error {
	list, err := h.db.ListStandingOrders(c.Request().Context(), currentUser(c).ID)
	if err != nil {
		return err
	}
	out := struct {
		Orders []apiOrder `json:"orders"`
	}{Orders: []apiOrder{}}
	for _, o := range list {
		out.Orders = append(out.Orders, toAPIOrder(o))
	}
	return writeJSON(c, http.StatusOK, out)
}

func (h *Handler) handleAPIOrderCancel(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	u := currentUser(c)
	if _, err := h.wf.CancelStandingOrder(c.Request().Context(), u.ID, id); err != nil {
		return err
	}
	row, err := h.db.FindStandingOrder(c.Request().Context(), u.ID, id)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, toAPIOrder(row))
}

package web

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
	"github.com/gpumarket/gpumarket/workflow"
)

// Metered rentals and the prepaid balance (docs/metered.md): the balance
// page, "Start now, metered" on the offer page, the stop on the
// reservation page, the provider's opt-in, and their API.

// balanceView builds the buyer's balance page.
func (h *Handler) balanceView(ctx context.Context, buyerID int64) (views.BalanceView, error) {
	es, err := h.db.ListBalanceEntries(ctx, buyerID)
	if err != nil {
		return views.BalanceView{}, err
	}
	sum := market.SummarizeBalance(buyerID, es)
	v := views.BalanceView{Balance: sum.Balance.String(), TopUps: sum.TopUps.String(), Draws: sum.Draws.String(), Refunds: sum.Refunds.String(),
		Simulated: h.simulated()}
	if m, err := h.db.DefaultPaymentMethod(ctx, buyerID); err == nil {
		v.HasCard, v.CardLabel = true, m.Label
	} else if market.ErrorCode(err) != market.CodeNotFound {
		return views.BalanceView{}, err
	}
	for _, e := range es {
		row := views.BalanceStatementRow{When: formatTime(e.At)}
		switch e.Kind {
		case market.EntryTopUp:
			row.What, row.Amount = "Top-up", "+"+e.Amount.String()
		case market.EntryDraw:
			row.What, row.Amount = fmt.Sprintf("Metered rental #%d: %s", e.ReservationID, drawMinutesText(e.IdempotencyKey)), "−"+e.Amount.String()
		case market.EntryBalanceRefund:
			row.What, row.Amount = "Refund to your card", "−"+e.Amount.String()
		default:
			continue // the provider's side of a rental
		}
		v.Statement = append(v.Statement, row)
	}
	switch a, err := h.db.FindAutoTopUp(ctx, buyerID); market.ErrorCode(err) {
	case "":
		v.AutoSet, v.AutoThreshold, v.AutoAmount, v.AutoPaused = true, a.Threshold.Decimal(), a.Amount.Decimal(), a.PausedReason
	case market.CodeNotFound:
	default:
		return views.BalanceView{}, err
	}
	ms, err := h.db.ListMeteredRentals(ctx, buyerID)
	if err != nil {
		return views.BalanceView{}, err
	}
	for _, m := range ms {
		v.Rentals = append(v.Rentals, meteredRow(m))
	}
	return v, nil
}

// drawMinutesText is a draw's minutes from its key ("minutes 4–11").
func drawMinutesText(key string) string {
	var id, from, to int64
	if _, err := fmt.Sscanf(key, "metered_%d_min_%d_%d", &id, &from, &to); err != nil {
		return "metered time"
	}
	return fmt.Sprintf("%d minute(s), minutes %d–%d of its clock", to-from, from, to)
}

func meteredRow(m store.MeteredRental) views.MeteredRentalRow {
	return views.MeteredRentalRow{ID: strconv.FormatInt(m.ReservationID, 10), URL: fmt.Sprintf("/reservations/%d", m.ReservationID),
		Offer: fmt.Sprintf("Offer #%d", m.OfferID), Devices: m.Devices, State: meteredState(m), Clock: meteredClock(m),
		Minutes: strconv.FormatInt(m.DrawnMinutes, 10), Drawn: m.DrawnCents.String()}
}

func meteredState(m store.MeteredRental) string {
	if m.Running() {
		return "running"
	}
	return market.MeteredStopLabel(m.StopReason)
}

func meteredClock(m store.MeteredRental) string {
	if m.ClockStart.IsZero() {
		return "The clock starts when the machine is usable: access handed over and the acceptance test passed, or your container running."
	}
	s := "Clock started " + formatTime(m.ClockStart)
	if !m.StopAt.IsZero() {
		s += ", stopped " + formatTime(m.StopAt)
	}
	return s + "."
}

func (h *Handler) handleBalance(c echo.Context) error {
	v, err := h.balanceView(c.Request().Context(), currentUser(c).ID)
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.BalancePage(h.page(c, "Prepaid balance"), v))
}

// msgDollarAmount is the message by an amount of money that is not one.
const msgDollarAmount = "Enter an amount in dollars, e.g. 20.00."

// handleTopUp tops up the balance from the buyer's saved card
// (workflow.TopUpWithSavedCard). A bad amount or a declined card
// re-renders the page with 422 and the message next to the amount.
func (h *Handler) handleTopUp(c echo.Context) error {
	ctx := c.Request().Context()
	u := currentUser(c)
	raw := c.FormValue("amount")
	amount, perr := market.ParseCents(raw)
	var err error
	if perr != nil {
		err = market.Errorf(market.CodeInvalid, msgDollarAmount)
	} else if _, err = h.wf.TopUpWithSavedCard(ctx, u.ID, amount); err == nil {
		h.setFlash(c, "ok", fmt.Sprintf("Your balance is topped up by %s.", amount))
		return c.Redirect(http.StatusSeeOther, "/balance")
	}
	if code := market.ErrorCode(err); code != market.CodeInvalid && code != market.CodeConflict {
		return err
	}
	v, verr := h.balanceView(ctx, u.ID)
	if verr != nil {
		return verr
	}
	v.Amount, v.AmountError = raw, market.ErrorMessage(err)
	return render(c, http.StatusUnprocessableEntity, views.BalancePage(h.page(c, "Prepaid balance"), v))
}

// handleTopUpCheckout starts a top-up on the processor's payment page
// (workflow.StartTopUpCheckout); a bad amount re-renders the page with 422.
func (h *Handler) handleTopUpCheckout(c echo.Context) error {
	ctx := c.Request().Context()
	u := currentUser(c)
	raw := c.FormValue("amount")
	amount, perr := market.ParseCents(raw)
	var err error = market.Errorf(market.CodeInvalid, msgDollarAmount)
	if perr == nil {
		var to string
		if to, err = h.wf.StartTopUpCheckout(ctx, u.ID, amount, workflow.CheckoutURLs{Success: h.absURL("/balance/top-up/return"), Cancel: h.absURL("/balance")}); err == nil {
			return c.Redirect(http.StatusSeeOther, to)
		}
	}
	if market.ErrorCode(err) != market.CodeInvalid {
		return err
	}
	v, verr := h.balanceView(ctx, u.ID)
	if verr != nil {
		return verr
	}
	v.CheckoutAmount, v.CheckoutError = raw, market.ErrorMessage(err)
	return render(c, http.StatusUnprocessableEntity, views.BalancePage(h.page(c, "Prepaid balance"), v))
}

// handleTopUpReturn is where the payment page sends the buyer back: the
// top-up is read from the processor and recorded paid
// (workflow.CompleteTopUpCheckout).
func (h *Handler) handleTopUpReturn(c echo.Context) error {
	id, err := strconv.ParseInt(c.QueryParam("top_up"), 10, 64)
	if err != nil {
		return market.Errorf(market.CodeNotFound, "That top-up could not be found.")
	}
	t, err := h.wf.CompleteTopUpCheckout(c.Request().Context(), currentUser(c).ID, id)
	switch {
	case market.ErrorCode(err) == market.CodeConflict:
		h.setFlash(c, "error", market.ErrorMessage(err))
	case err != nil:
		return err
	default:
		h.setFlash(c, "ok", fmt.Sprintf("Your balance is topped up by %s.", t.Amount))
	}
	return c.Redirect(http.StatusSeeOther, "/balance")
}

// handleBalanceRefund refunds the unused balance (workflow.RefundBalance).
func (h *Handler) handleBalanceRefund(c echo.Context) error {
	ctx := c.Request().Context()
	u := currentUser(c)
	parts, err := h.wf.RefundBalance(ctx, u.ID, 0)
	if err == nil {
		var sum market.Cents
		for _, p := range parts {
			sum += p.Amount
		}
		h.setFlash(c, "ok", fmt.Sprintf("%s of unused balance is being refunded to the cards that paid it.", sum))
		return c.Redirect(http.StatusSeeOther, "/balance")
	}
	if market.ErrorCode(err) != market.CodeConflict {
		return err
	}
	v, verr := h.balanceView(ctx, u.ID)
	if verr != nil {
		return verr
	}
	v.RefundError = market.ErrorMessage(err)
	return render(c, http.StatusUnprocessableEntity, views.BalancePage(h.page(c, "Prepaid balance"), v))
}

// handleAutoTopUp sets or clears (both fields empty) the automatic top-up
// (workflow.SetAutoTopUp); a bad value re-renders the page with 422 and
// the message next to its field.
func (h *Handler) handleAutoTopUp(c echo.Context) error {
	ctx := c.Request().Context()
	u := currentUser(c)
	rawT, rawA := strings.TrimSpace(c.FormValue("threshold")), strings.TrimSpace(c.FormValue("amount"))
	parse := func(raw string) (market.Cents, bool) {
		if raw == "" {
			return 0, true
		}
		v, err := market.ParseCents(raw)
		return v, err == nil
	}
	threshold, okT := parse(rawT)
	amount, okA := parse(rawA)
	var err error
	if okT && okA {
		err = h.wf.SetAutoTopUp(ctx, u.ID, threshold, amount)
		if err == nil {
			if threshold == 0 {
				h.setFlash(c, "ok", "Automatic top-up is off.")
			} else {
				h.setFlash(c, "ok", fmt.Sprintf("Below %s your balance is topped up by %s from your card.", threshold, amount))
			}
			return c.Redirect(http.StatusSeeOther, "/balance")
		}
		if market.ErrorCode(err) != market.CodeInvalid {
			return err
		}
	} else {
		// The other field is still checked, a valid stand-in for the bad one.
		if !okT {
			threshold = market.MeteredMinAutoThreshold
		}
		if !okA {
			amount = market.MeteredMinTopUp
		}
		err = market.ValidateAutoTopUp(threshold, amount)
	}
	v, verr := h.balanceView(ctx, u.ID)
	if verr != nil {
		return verr
	}
	v.AutoThreshold, v.AutoAmount = rawT, rawA
	fe := market.FieldErrors(err)
	switch {
	case !okT:
		v.AutoThresholdError = "Enter an amount in dollars, e.g. 5.00."
	case fe["threshold"] != "":
		v.AutoThresholdError = fe["threshold"]
	}
	switch {
	case !okA:
		v.AutoAmountError = msgDollarAmount
	case fe["amount"] != "":
		v.AutoAmountError = fe["amount"]
	}
	if v.AutoThresholdError == "" && v.AutoAmountError == "" && err != nil {
		v.AutoAmountError = market.ErrorMessage(err)
	}
	return render(c, http.StatusUnprocessableEntity, views.BalancePage(h.page(c, "Prepaid balance"), v))
}

// meteredStartView is the offer page's metered panel for the visitor u
// (nil: signed out); no panel when the offer does not allow it.
func (h *Handler) meteredStartView(ctx context.Context, o market.Offer, u *market.User, listed bool) (views.MeteredStartView, error) {
	terms, err := h.db.FindOfferMetered(ctx, o.ID)
	if u != nil && u.ID == o.ProviderID {
		v := views.MeteredStartView{OwnerAction: fmt.Sprintf("/provider/offers/%d/metered", o.ID), SLA: market.MeteredSLA}
		switch {
		case err == nil:
			v.Allowed, v.NoticeValue = true, strconv.Itoa(terms.NoticeMinutes)
		case market.ErrorCode(err) != market.CodeNotFound:
			return views.MeteredStartView{}, err
		}
		return v, nil
	}
	if market.ErrorCode(err) == market.CodeNotFound || (err == nil && !listed) {
		return views.MeteredStartView{}, nil
	}
	if err != nil {
		return views.MeteredStartView{}, err
	}
	v := views.MeteredStartView{Show: true, SLA: market.MeteredSLA, MaxDevices: strconv.Itoa(o.Devices()), Devices: "1",
		Price:  fmt.Sprintf("%s per device-hour, billed per whole minute of usable time", o.PriceCentsPerDeviceHour),
		Notice: fmt.Sprintf("The provider may stop it with %d minutes' notice for a booking of the same devices; it holds them that far ahead while it runs.", terms.NoticeMinutes)}
	if u != nil {
		v.Action = fmt.Sprintf("/offers/%d/metered", o.ID)
		bal, err := h.db.FindBalance(ctx, u.ID)
		if err != nil {
			return views.MeteredStartView{}, err
		}
		v.Balance = bal.Balance.String()
	}
	return v, nil
}

// handleMeteredStart starts a metered rental of the offer now
// (workflow.StartMetered) and shows its reservation; a refusal re-renders
// the offer page with 422 and the message in the panel.
func (h *Handler) handleMeteredStart(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	u := currentUser(c)
	devices, derr := strconv.Atoi(strings.TrimSpace(c.FormValue("devices")))
	maxMinutes := 0
	if s := strings.TrimSpace(c.FormValue("max_minutes")); s != "" {
		if maxMinutes, err = strconv.Atoi(s); err != nil || maxMinutes < 1 {
			derr = fmt.Errorf("bad maximum")
		}
	}
	if derr == nil {
		m, err := h.wf.StartMetered(ctx, u.ID, id, devices, maxMinutes)
		if err == nil {
			h.setFlash(c, "ok", "Your metered rental has started: its clock starts when the machine is usable.")
			return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/reservations/%d", m.ReservationID))
		}
		if code := market.ErrorCode(err); code != market.CodeInvalid && code != market.CodeConflict {
			return err
		}
		derr = err
	}
	msg := "Enter the number of devices, and a maximum in whole minutes or nothing."
	if market.ErrorCode(derr) != "" && market.ErrorCode(derr) != market.CodeInternal {
		msg = market.ErrorMessage(derr)
	}
	c.Set(meteredErrorKey, meteredFormError{Message: msg, Devices: c.FormValue("devices"), Max: c.FormValue("max_minutes")})
	return h.renderOfferShow(c, id, http.StatusUnprocessableEntity, spotBidForm{}, nil, "")
}

// meteredErrorKey carries a refused start's form to the offer page.
const meteredErrorKey = "metered_form_error"

type meteredFormError struct{ Message, Devices, Max string }

// meteredFormFrom fills the panel with a refused start's input and message.
func meteredFormFrom(c echo.Context, v *views.MeteredStartView) {
	// A quote card's "Start now, metered" link carries its devices.
	if n, err := strconv.Atoi(c.QueryParam("devices")); err == nil && n >= 1 {
		if max, err := strconv.Atoi(v.MaxDevices); err == nil && n <= max {
			v.Devices = strconv.Itoa(n)
		}
	}
	if e, ok := c.Get(meteredErrorKey).(meteredFormError); ok {
		v.Error, v.Devices, v.Max = e.Message, e.Devices, e.Max
	}
}

// meteredPanel is the reservation page's metered panel; none for a block.
func (h *Handler) meteredPanel(ctx context.Context, r market.Reservation, now time.Time) (views.MeteredPanelView, error) {
	m, err := h.db.FindMeteredRental(ctx, r.ID)
	if market.ErrorCode(err) == market.CodeNotFound {
		return views.MeteredPanelView{}, nil
	}
	if err != nil {
		return views.MeteredPanelView{}, err
	}
	bal, err := h.db.FindBalance(ctx, r.BuyerID)
	if err != nil {
		return views.MeteredPanelView{}, err
	}
	v := views.MeteredPanelView{Show: true, State: meteredState(m), Clock: meteredClock(m),
		Minutes: fmt.Sprintf("%d minute(s)", m.DrawnMinutes), Drawn: m.DrawnCents.String(), Balance: bal.Balance.String(),
		Price: fmt.Sprintf("%d device(s) at %s per device-hour, per whole minute", m.Devices, m.Price)}
	if m.Running() {
		v.HeldTo, v.StopURL = formatTime(m.PieceEnd), fmt.Sprintf("/reservations/%d/stop", r.ID)
	}
	return v, nil
}

// handleMeteredStop stops the buyer's metered rental (workflow.StopMetered).
func (h *Handler) handleMeteredStop(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	if _, err := h.wf.StopMetered(c.Request().Context(), currentUser(c).ID, id); err != nil {
		if market.ErrorCode(err) != market.CodeConflict {
			return err
		}
		h.setFlash(c, "error", market.ErrorMessage(err))
	} else {
		h.setFlash(c, "ok", "Your metered rental is stopped: access is being removed and the last minutes drawn.")
	}
	return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/reservations/%d", id))
}

// handleOfferMetered lets the provider allow metered rentals of an offer
// (allow=1, notice_minutes) or stop allowing them (workflow.SetOfferMetered).
func (h *Handler) handleOfferMetered(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	notice := 0
	if s := strings.TrimSpace(c.FormValue("notice_minutes")); s != "" {
		if notice, err = strconv.Atoi(s); err != nil {
			notice = -1
		}
	}
	allow := c.FormValue("allow") == "1"
	if err := h.wf.SetOfferMetered(c.Request().Context(), currentUser(c).ID, id, allow, notice); err != nil {
		if market.ErrorCode(err) != market.CodeInvalid {
			return err
		}
		h.setFlash(c, "error", market.ErrorMessage(err))
	} else if allow {
		h.setFlash(c, "ok", "Metered rentals of this offer are allowed.")
	} else {
		h.setFlash(c, "ok", "Metered rentals of this offer are no longer allowed; those under way go on.")
	}
	return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/offers/%d#metered", id))
}

// API.

// apiBalance is a buyer's balance and its statement.
type apiBalance struct {
	BalanceCents market.Cents      `json:"balance_cents"`
	TopUpsCents  market.Cents      `json:"top_ups_cents"`
	DrawsCents   market.Cents      `json:"draws_cents"`
	RefundsCents market.Cents      `json:"refunds_cents"`
	Entries      []apiBalanceEntry `json:"entries"`
	AutoTopUp    apiAutoTopUp      `json:"auto_top_up"`
}

type apiBalanceEntry struct {
	At            time.Time    `json:"at"`
	Kind          string       `json:"kind"`
	AmountCents   market.Cents `json:"amount_cents"`
	ReservationID int64        `json:"reservation_id,omitempty"`
}

func (h *Handler) handleAPIBalance(c echo.Context) error {
	u := currentUser(c)
	es, err := h.db.ListBalanceEntries(c.Request().Context(), u.ID)
	if err != nil {
		return err
	}
	s := market.SummarizeBalance(u.ID, es)
	out := apiBalance{BalanceCents: s.Balance, TopUpsCents: s.TopUps, DrawsCents: s.Draws, RefundsCents: s.Refunds, Entries: []apiBalanceEntry{}}
	if out.AutoTopUp, err = h.apiAutoTopUpOf(c.Request().Context(), u.ID); err != nil {
		return err
	}
	for _, e := range es {
		if e.Kind == market.EntryTopUp || e.Kind == market.EntryDraw || e.Kind == market.EntryBalanceRefund {
			out.Entries = append(out.Entries, apiBalanceEntry{At: e.At, Kind: e.Kind, AmountCents: e.Amount, ReservationID: e.ReservationID})
		}
	}
	return writeJSON(c, http.StatusOK, out)
}

// apiMetered is a metered rental.
type apiMetered struct {
	ReservationID int64        `json:"reservation_id"`
	OfferID       int64        `json:"offer_id"`
	Devices       int          `json:"devices"`
	PriceCents    market.Cents `json:"price_cents_per_device_hour"`
	State         string       `json:"state"`
	ClockStart    *time.Time   `json:"clock_start,omitempty"`
	StopAt        *time.Time   `json:"stopped_at,omitempty"`
	StopReason    string       `json:"stop_reason,omitempty"`
	Minutes       int64        `json:"minutes_billed"`
	DrawnCents    market.Cents `json:"drawn_cents"`
	HeldUntil     time.Time    `json:"held_until"`
}

func toAPIMetered(m store.MeteredRental) apiMetered {
	out := apiMetered{ReservationID: m.ReservationID, OfferID: m.OfferID, Devices: m.Devices, PriceCents: m.Price, State: "running",
		StopReason: m.StopReason, Minutes: m.DrawnMinutes, DrawnCents: m.DrawnCents, HeldUntil: m.PieceEnd}
	if !m.ClockStart.IsZero() {
		t := m.ClockStart
		out.ClockStart = &t
	}
	if !m.StopAt.IsZero() {
		t := m.StopAt
		out.StopAt, out.State = &t, "stopped"
	}
	return out
}

type apiMeteredStart struct {
	Devices    int `json:"devices"`
	MaxMinutes int `json:"max_minutes"`
}

func (h *Handler) handleAPIMeteredStart(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	var body apiMeteredStart
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	m, err := h.wf.StartMetered(c.Request().Context(), currentUser(c).ID, id, body.Devices, body.MaxMinutes)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusCreated, toAPIMetered(m))
}

func (h *Handler) handleAPIMeteredStop(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	m, err := h.wf.StopMetered(c.Request().Context(), currentUser(c).ID, id)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, toAPIMetered(m))
}

type apiAutoTopUpBody struct {
	ThresholdCents market.Cents `json:"threshold_cents"`
	AmountCents    market.Cents `json:"amount_cents"`
}

type apiAutoTopUp struct {
	On             bool         `json:"on"`
	ThresholdCents market.Cents `json:"threshold_cents"`
	AmountCents    market.Cents `json:"amount_cents"`
	PausedReason   string       `json:"paused_reason"`
}

// handleAPIAutoTopUp sets or clears the automatic top-up
// (workflow.SetAutoTopUp) and returns it as stored.
func (h *Handler) handleAPIAutoTopUp(c echo.Context) error {
	ctx := c.Request().Context()
	u := currentUser(c)
	var body apiAutoTopUpBody
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	if err := h.wf.SetAutoTopUp(ctx, u.ID, body.ThresholdCents, body.AmountCents); err != nil {
		return err
	}
	out, err := h.apiAutoTopUpOf(ctx, u.ID)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, out)
}

// apiAutoTopUpOf is the buyer's automatic top-up as stored (off when
// none is set).
func (h *Handler) apiAutoTopUpOf(ctx context.Context, userID int64) (apiAutoTopUp, error) {
	switch a, err := h.db.FindAutoTopUp(ctx, userID); market.ErrorCode(err) {
	case "":
		return apiAutoTopUp{On: true, ThresholdCents: a.Threshold, AmountCents: a.Amount, PausedReason: a.PausedReason}, nil
	case market.CodeNotFound:
		return apiAutoTopUp{}, nil
	default:
		return apiAutoTopUp{}, err
	}
}

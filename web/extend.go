package web

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/views"
	"github.com/gpumarket/gpumarket/workflow"
)

// extendOffer is the reservation page's offer to extend a running
// reservation (workflow.QuoteExtension: how long its nodes stay free after
// it), with the extensions already booked.
func (h *Handler) extendOffer(ctx context.Context, buyerID int64, r market.Reservation) (views.ExtendOffer, error) {
	v := views.ExtendOffer{Action: fmt.Sprintf("/reservations/%d/extend", r.ID)}
	exts, err := h.db.FindExtensions(ctx, r.ID)
	if err != nil {
		return v, err
	}
	for _, x := range exts {
		v.Extended = append(v.Extended, views.ExtensionLink{
			URL:   fmt.Sprintf("/reservations/%d", x.ID),
			Label: fmt.Sprintf("#%d, %s, until %s", x.ID, x.State.Label(), formatTime(x.End())),
		})
	}
	if r.ExtendsID > 0 {
		v.Extends, v.ExtendsURL = fmt.Sprintf("reservation #%d", r.ExtendsID), fmt.Sprintf("/reservations/%d", r.ExtendsID)
	}
	if r.State != market.ReservationActive {
		return v, nil
	}
	q, err := h.wf.QuoteExtension(ctx, buyerID, r.ID, 0)
	if market.ErrorCode(err) == market.CodeConflict {
		v.Show, v.Room = true, market.ErrorMessage(err)
		return v, nil
	}
	if err != nil {
		return v, err
	}
	v.Show = true
	v.Room, v.CanAsk = roomText(q.Limits), q.Limits.OK()
	v.Hours, v.MinHours, v.MaxHours = strconv.Itoa(q.Limits.MinHours), strconv.Itoa(q.Limits.MinHours), strconv.Itoa(q.Limits.MaxHours)
	return v, nil
}

// roomText says how long the same devices are free after a reservation.
func roomText(l market.ExtensionLimits) string {
	switch {
	case !l.OK():
		return "The same devices are booked right after it, so it cannot be extended now."
	case l.MinHours == l.MaxHours:
		return fmt.Sprintf("The same devices are free after it for %s: it can be extended by exactly that.", plural(l.MaxHours, "hour"))
	}
	return fmt.Sprintf("The same devices are free after it for %s; it can be extended by %d to %d hours.", plural(l.MaxHours, "hour"), l.MinHours, l.MaxHours)
}

// readExtendHours reads the hours asked for; a malformed value is an
// invalid error on the field.
func readExtendHours(c echo.Context) (int, string, error) {
	s := strings.TrimSpace(c.FormValue("hours"))
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		msg := "Enter a whole number of hours, at least 1."
		return 0, s, &market.Error{Code: market.CodeInvalid, Message: msg, Fields: map[string]string{"hours": msg}}
	}
	return n, s, nil
}

// handleExtendConfirm is the confirmation step: the extension's price for
// the hours asked, and the button that books it.
func (h *Handler) handleExtendConfirm(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	hours, typed, herr := readExtendHours(c)
	q, err := h.wf.QuoteExtension(c.Request().Context(), currentUser(c).ID, id, hours)
	if herr != nil {
		err = herr
	}
	return h.extendConfirm(c, id, typed, q, err, "")
}

// extendConfirm renders the confirmation page for quote q, or, with err,
// the reason it cannot be booked (422 for a bad number of hours, 409 when
// the reservation or its devices do not allow it); message is shown above.
func (h *Handler) extendConfirm(c echo.Context, id int64, typed string, q workflow.ExtensionQuote, err error, message string) error {
	if market.ErrorCode(err) == market.CodeNotFound || (err != nil && market.ErrorCode(err) == market.CodeInternal) {
		return err
	}
	r := q.Reservation
	action := fmt.Sprintf("/reservations/%d/extend", id)
	v := views.ExtendConfirmView{
		ReservationID: strconv.FormatInt(id, 10), ReservationURL: fmt.Sprintf("/reservations/%d", id),
		Window: formatSpan(r.Start(), r.End()), Hours: typed, Errors: market.FieldErrors(err),
		Room: roomText(q.Limits), MinHours: strconv.Itoa(q.Limits.MinHours), MaxHours: strconv.Itoa(q.Limits.MaxHours),
		Action: action,
	}
	status := http.StatusOK
	switch code := market.ErrorCode(err); {
	case err == nil:
	case code == market.CodeInvalid && len(v.Errors) > 0:
		status = http.StatusUnprocessableEntity
	default:
		status = http.StatusConflict
		v.Message = market.ErrorMessage(err)
	}
	if err == nil && len(q.Extension.Pieces) > 0 {
		ext := q.Extension
		v.Priced = true
		v.Amount, v.AmountCents = ext.Amount.String(), strconv.FormatInt(int64(ext.Amount), 10)
		start, end := ext.Pieces[0].Start, ext.Pieces[0].End
		cache := map[int64]pieceInfo{}
		for _, p := range ext.Pieces {
			info, err := h.pieceInfo(c.Request().Context(), p.OfferID, cache)
			if err != nil {
				return err
			}
			start, end = minTime(start, p.Start), maxTime(end, p.End)
			instance := market.Cents(int64(p.Devices) * int64(ext.Hours) * int64(p.PriceCents))
			working := fmt.Sprintf("%d × %s × %s", p.Devices, plural(ext.Hours, "hour"), p.PriceCents)
			if storage := p.AmountCents - instance; storage > 0 {
				working += fmt.Sprintf(" + %s storage", storage)
			}
			v.Pieces = append(v.Pieces, views.ExtendPieceRow{
				OfferTitle: info.title, OfferURL: fmt.Sprintf("/offers/%d", p.OfferID),
				Devices: strconv.Itoa(p.Devices), Nodes: nodesText(p.Nodes), Window: formatSpan(p.Start, p.End),
				Price: p.PriceCents.String() + "/device-hour", Amount: p.AmountCents.String(), Working: working,
			})
		}
		v.NewWindow = fmt.Sprintf("%s more: %s", plural(ext.Hours, "hour"), formatSpan(start, end))
		v.HoldNote = fmt.Sprintf("Booking holds the devices for %d minutes as a new reservation; pay for it there to confirm it. Until then the extension is not yours.", int(holdDuration.Minutes()))
		v.Cancellation = cancelScheduleView(market.CancellationScheduleOf(ext.Pieces), h.now(), cancelQuoted).Summary
	}
	if message != "" {
		v.Message = message
		status = http.StatusConflict
	}
	return render(c, status, views.ExtendConfirm(h.page(c, fmt.Sprintf("Extend reservation %d", id)), v))
}

// nodesText names the nodes a piece holds, counted from 1 as the offer's
// page does.
func nodesText(ns []market.NodeShare) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = fmt.Sprintf("node %d (%s)", n.Node, plural(n.Devices, "device"))
	}
	if len(parts) == 0 {
		return ""
	}
	return "The same nodes: " + strings.Join(parts, ", ")
}

// handleExtend books the extension the buyer confirmed, at the amount they
// saw, and sends them to the new reservation to pay for it.
func (h *Handler) handleExtend(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	u := currentUser(c)
	ctx := c.Request().Context()
	hours, typed, herr := readExtendHours(c)
	seen, perr := strconv.ParseInt(c.FormValue("amount"), 10, 64)
	if herr == nil && perr != nil {
		herr = market.Errorf(market.CodeConflict, "The price was not sent with the confirmation; check it and confirm again.")
	}
	var r market.Reservation
	if herr == nil {
		r, err = h.wf.Extend(ctx, u.ID, id, hours, market.Cents(seen), holdDuration)
	} else {
		err = herr
	}
	if err != nil {
		if code := market.ErrorCode(err); code != market.CodeConflict && code != market.CodeInvalid {
			return err
		}
		q, qerr := h.wf.QuoteExtension(ctx, u.ID, id, hours)
		if market.ErrorCode(qerr) == market.CodeNotFound {
			return qerr
		}
		if market.ErrorCode(err) == market.CodeConflict && qerr == nil {
			// The price or the devices changed: show the page again as it is now.
			return h.extendConfirm(c, id, typed, q, nil, market.ErrorMessage(err))
		}
		return h.extendConfirm(c, id, typed, q, err, "")
	}
	h.setFlash(c, "ok", fmt.Sprintf("Extension booked from %s to %s and held until %s. Pay before then to confirm it.",
		formatTime(r.Start()), formatTime(r.End()), formatTime(r.HoldExpiresAt)))
	return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/reservations/%d", r.ID))
}

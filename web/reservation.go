package web

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/views"
)

// cancel cancels the signed-in buyer's reservation under its policy
// (workflow.Cancel: capacity released, a paid one refunded less the fee);
// shared by the browser and the API.
func (h *Handler) cancel(c echo.Context, id int64) (market.Reservation, error) {
	return h.wf.Cancel(c.Request().Context(), currentUser(c).ID, id)
}

func (h *Handler) handleReserve(c echo.Context) error {
	u := currentUser(c)
	req, err := market.DecodeRequestJSON([]byte(c.FormValue("request")))
	if err != nil {
		return market.Errorf(market.CodeInvalid, "The quote could not be read; please get fresh quotes.")
	}
	r, err := h.wf.BookQuote(c.Request().Context(), u.ID, req, c.FormValue("quote_id"), holdDuration)
	if code := market.ErrorCode(err); code == market.CodeConflict || (code == market.CodeInvalid && market.FieldErrors(err)["quote_id"] != "") {
		// Whoever loses a race gets the reason and fresh quotes, never a 500.
		values := requestValues(req)
		v := h.builderView(c, values)
		qv, qerr := h.quotes(c, req)
		if qerr != nil {
			return qerr
		}
		qv.Message = market.ErrorMessage(err)
		v.Quotes = qv
		return render(c, http.StatusConflict, views.RequestBuilder(h.page(c, "Request compute"), v))
	}
	if err != nil {
		return err
	}
	h.setFlash(c, "ok", fmt.Sprintf("Reserved from %s to %s and held until %s. Pay before then to confirm it.",
		formatTime(r.Start()), formatTime(r.End()), formatTime(r.HoldExpiresAt)))
	return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/reservations/%d", r.ID))
}

func (h *Handler) handleReservations(c echo.Context) error {
	u := currentUser(c)
	list, err := h.db.ListBuyerReservations(c.Request().Context(), u.ID)
	if err != nil {
		return err
	}
	sales, err := h.boughtOnResaleAll(c.Request().Context(), list)
	if err != nil {
		return err
	}
	v := views.ReservationsView{}
	for _, r := range list {
		row := reservationRow(r, h.now())
		if sale, bought := sales[r.ID]; bought {
			markBoughtOnResale(&row, sale)
		}
		v.Rows = append(v.Rows, row)
	}
	return render(c, http.StatusOK, views.Reservations(h.page(c, "My reservations"), v))
}

func reservationRow(r market.Reservation, now time.Time) views.ReservationRow {
	return views.ReservationRow{
		ID: strconv.FormatInt(r.ID, 10), URL: fmt.Sprintf("/reservations/%d", r.ID),
		State: string(r.State), StateLabel: r.StateLabel(),
		Devices: strconv.Itoa(r.Devices()), Window: formatTime(r.Start()) + " – " + formatTime(r.End()),
		Amount: r.AmountCents.String(), Pieces: strconv.Itoa(len(r.Pieces)),
	}
}

func (h *Handler) handleReservationShow(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	r, err := h.db.FindBuyerReservation(ctx, currentUser(c).ID, id)
	if err != nil {
		return err
	}
	now := h.now()
	v := views.ReservationView{Row: reservationRow(r, now), CancelURL: fmt.Sprintf("/reservations/%d/cancel", r.ID)}
	if r.State == market.ReservationHeld {
		v.HoldUntil = formatTime(r.HoldExpiresAt)
	}
	if r.CancelFeeCents > 0 {
		v.CancelFee = r.CancelFeeCents.String()
	}
	if _, err := market.CancellationFee(r, now); err == nil {
		v.CanCancel = true
		stage := cancelPaid
		if r.State == market.ReservationHeld {
			stage = cancelHeld
		}
		v.CancelSchedule = cancelScheduleView(market.CancellationScheduleOf(r.Pieces), now, stage)
	}
	cache := map[int64]pieceInfo{}
	for _, p := range r.Pieces {
		info, err := h.pieceInfo(ctx, p.OfferID, cache)
		if err != nil {
			return err
		}
		v.Pieces = append(v.Pieces, views.ReservationPieceRow{
			OfferTitle: info.title, OfferURL: fmt.Sprintf("/offers/%d", p.OfferID), Provider: info.provider,
			Devices: strconv.Itoa(p.Devices), Window: formatTime(p.Start) + " – " + formatTime(p.End),
			Price: p.PriceCents.String() + "/device-hour", Amount: p.AmountCents.String(), Interruptible: p.Interruptible,
			Cancellation: market.CancellationPolicyText(p.FreeCancelHours, p.CancelFeeBP),
			Acceptance:   market.RejectionPolicyText(p.RejectMinutes),
		})
	}
	if v.Billing, err = h.reservationBilling(ctx, r); err != nil {
		return err
	}
	if v.Disputes, v.DisputeURL, err = h.reservationDisputes(ctx, r); err != nil {
		return err
	}
	if v.Work, err = h.workReportView(c, r, views.WorkReportValues{}, nil); err != nil {
		return err
	}
	if v.Extend, err = h.extendOffer(ctx, currentUser(c).ID, r); err != nil {
		return err
	}
	if v.Resale, err = h.resalePanel(ctx, currentUser(c).ID, r, now); err != nil {
		return err
	}
	if v.Replace, err = h.replacementPanel(ctx, r, now); err != nil {
		return err
	}
	if v.Access, err = h.reservationAccessView(c, r, now); err != nil {
		return err
	}
	if v.Contact, err = h.reservationContact(ctx, currentUser(c).ID, r, backReservation); err != nil {
		return err
	}
	acceptance, err := h.db.ListReservationAcceptance(ctx, r.ID)
	if err != nil {
		return err
	}
	grounds, err := h.db.FindRejectionGrounds(ctx, r, now)
	if err != nil {
		return err
	}
	v.Reject = rejectPanelView(r, acceptance, grounds, now)
	if v.Metered, err = h.meteredPanel(ctx, r, now); err != nil {
		return err
	}
	if v.Observe, err = h.observationPanel(ctx, r, "", ""); err != nil {
		return err
	}
	if r.ResaleOf != 0 {
		sale, bought, err := h.boughtOnResale(ctx, r.ID)
		if err != nil {
			return err
		}
		if bought {
			markBoughtOnResale(&v.Row, sale)
		}
	}
	resaleAdjust(r, &v)
	return render(c, http.StatusOK, views.Reservation(h.page(c, fmt.Sprintf("Reservation %d", r.ID)), v))
}

// timelineDays is how far ahead the provider's utilisation timeline looks.
const timelineDays = 14

func (h *Handler) handleProviderReservations(c echo.Context) error {
	u := currentUser(c)
	ctx := c.Request().Context()
	now := h.now()
	pieces, err := h.db.ListProviderPieces(ctx, u.ID)
	if err != nil {
		return err
	}
	v := views.ProviderReservationsView{}
	boughtFrom := map[int64]int64{} // original reservation → the one bought from it on resale
	for _, p := range pieces {
		if p.ResaleOf != 0 {
			boughtFrom[p.ResaleOf] = p.ReservationID
		}
	}
	for _, p := range pieces {
		if p.State == market.ReservationCancelled || p.State == market.ReservationExpired {
			continue
		}
		if !p.Piece.End.After(now) && p.State != market.ReservationActive {
			continue
		}
		row := views.ProviderReservationRow{
			ReservationID: strconv.FormatInt(p.ReservationID, 10), OfferTitle: p.OfferTitle, Buyer: p.BuyerName,
			Devices: strconv.Itoa(p.Piece.Devices), Window: formatTime(p.Piece.Start) + " – " + formatTime(p.Piece.End),
			State: string(p.State), StateLabel: p.State.Label(), Amount: p.Piece.AmountCents.String(),
		}
		switch {
		case p.ResaleOf != 0:
			row.Resale, row.ResaleID = "bought on resale from", strconv.FormatInt(p.ResaleOf, 10)
			row.Amount = "paid in #" + row.ResaleID
		case !p.ResoldAt.IsZero():
			row.Resale = "from " + formatTime(p.ResoldAt) + " to"
			if id, ok := boughtFrom[p.ReservationID]; ok {
				row.ResaleID = strconv.FormatInt(id, 10)
			}
		}
		if row.ResaleID != "" {
			row.ResaleURL = "/provider/bookings/" + row.ResaleID
		} else {
			row.Resale = ""
		}
		v.Rows = append(v.Rows, row)
	}
	offers, err := h.db.ListProviderOffers(ctx, u.ID)
	if err != nil {
		return err
	}
	day0 := now.Truncate(24 * time.Hour)
	v.Days = dayLabels(day0)
	for _, o := range offers {
		if o.State == market.OfferWithdrawn {
			continue
		}
		commitments, err := h.db.ListOfferCommitments(ctx, o.ID, now)
		if err != nil {
			return err
		}
		v.Timelines = append(v.Timelines, utilisation(o, commitments, day0))
	}
	if v.Payouts, err = h.providerPayouts(ctx, u.ID, pieces); err != nil {
		return err
	}
	return render(c, http.StatusOK, views.ProviderReservations(h.page(c, "Bookings"), v))
}

func dayLabels(day0 time.Time) []string {
	out := make([]string, timelineDays)
	for i := range out {
		out[i] = day0.AddDate(0, 0, i).Format("2 Jan")
	}
	return out
}

// utilisation is the share of an offer's device-hours committed on each of
// the next days.
func utilisation(o market.Offer, cs []market.Commitment, day0 time.Time) views.Timeline {
	t := views.Timeline{Title: o.Title, URL: fmt.Sprintf("/offers/%d", o.ID), Capacity: plural(o.Devices(), "device")}
	perDay := int64(o.Devices()) * 24 * 3600
	for i := 0; i < timelineDays; i++ {
		ds, de := day0.AddDate(0, 0, i), day0.AddDate(0, 0, i+1)
		var used int64
		for _, c := range cs {
			s, e := maxTime(c.Start, ds), minTime(c.End, de)
			if e.After(s) {
				used += int64(c.Devices) * int64(e.Sub(s)/time.Second)
			}
		}
		pct := 0
		if perDay > 0 {
			pct = int(market.MulDivRound(used, 100, perDay))
		}
		t.Cells = append(t.Cells, views.TimelineCell{Day: ds.Format("Mon 2 Jan"), Percent: strconv.Itoa(pct)})
	}
	return t
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

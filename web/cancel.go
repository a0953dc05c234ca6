package web

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/views"
)

// cancelStage is where a booking stands for its cancellation schedule.
type cancelStage int

const (
	cancelQuoted cancelStage = iota // a quote: not booked yet
	cancelHeld                      // held, unpaid: free to cancel now
	cancelPaid                      // confirmed: the schedule applies now
)

// cancelScheduleView states a booking's cancellation schedule in money and
// dates, as of now: one sentence, and the periods from now to the start
// with the fee and what a paid booking gets back in each.
func cancelScheduleView(s market.CancellationSchedule, now time.Time, stage cancelStage) views.CancelScheduleView {
	v := views.CancelScheduleView{Unpaid: stage != cancelPaid, Closes: formatTime(s.Closes)}
	if !now.Before(s.Closes) {
		// It starts at once ("as soon as possible"): only the unpaid hold can go.
		switch stage {
		case cancelQuoted:
			v.Summary = "Free to cancel until you pay. It starts when you reserve, so once paid it can no longer be cancelled."
		case cancelHeld:
			v.Summary = "Free to cancel until you pay. It started " + formatTime(s.Closes) + ", so once paid it can no longer be cancelled."
		}
		return v
	}
	type period struct {
		from, to time.Time
		fee      market.Cents
	}
	var periods []period
	from, fee := now, s.FeeAt(now)
	for _, st := range s.Steps {
		if st.After.After(now) {
			periods = append(periods, period{from, st.After, fee})
			from, fee = st.After, st.Fee
		}
	}
	periods = append(periods, period{from, s.Closes, fee})
	for i, p := range periods {
		row := views.CancelPeriodRow{Fee: "Free", Refund: s.Amount.String(), Now: i == 0}
		if p.fee > 0 {
			row.Fee, row.Refund = p.fee.String(), (s.Amount - p.fee).String()
		}
		switch {
		case i == 0 && p.to.Equal(s.Closes):
			row.Period = "Until the start, " + formatTime(p.to)
		case i == 0:
			row.Period = "Until " + formatTime(p.to)
		case p.to.Equal(s.Closes):
			row.Period = "After " + formatTime(p.from) + ", until the start"
		default:
			row.Period = "After " + formatTime(p.from) + ", until " + formatTime(p.to)
		}
		v.Rows = append(v.Rows, row)
	}

	// The sentence: what applies now, then each rise.
	var later []string
	for _, p := range periods[1:] {
		later = append(later, fmt.Sprintf("%s after %s", p.fee, formatTime(p.from)))
	}
	var paid string
	switch {
	case len(periods) == 1 && periods[0].fee == 0:
		paid = "free to cancel until the start, " + formatTime(s.Closes)
	case periods[0].fee == 0:
		paid = fmt.Sprintf("free to cancel until %s, then %s", formatTime(periods[1].from), periods[1].fee)
		later = later[1:]
	default:
		paid = fmt.Sprintf("cancelling costs %s of %s", periods[0].fee, s.Amount)
	}
	if len(later) > 0 {
		paid += "; " + strings.Join(later, "; ")
	}
	switch {
	case stage == cancelPaid:
		v.Summary = capitalise(paid) + "."
	case periods[0].fee == 0:
		v.Summary = capitalise(paid) + ". Until you pay, cancelling is free."
	default:
		v.Summary = "Free to cancel until you pay; once paid, " + paid + "."
	}
	return v
}

func capitalise(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// handleReservationCancelConfirm asks before cancelling: what cancelling
// now costs, and what is refunded. It is a page, so it works without
// JavaScript; its form posts to handleReservationCancel.
func (h *Handler) handleReservationCancelConfirm(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	r, err := h.db.FindBuyerReservation(c.Request().Context(), currentUser(c).ID, id)
	if err != nil {
		return err
	}
	v, err := cancelConfirmView(r, h.now())
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.CancelConfirm(h.page(c, fmt.Sprintf("Cancel reservation %d?", r.ID)), v))
}

// cancelConfirmView is the confirmation of cancelling r at now; an error
// when r can no longer be cancelled.
func cancelConfirmView(r market.Reservation, now time.Time) (views.CancelConfirmView, error) {
	fee, err := market.CancellationFee(r, now)
	if err != nil {
		return views.CancelConfirmView{}, err
	}
	v := views.CancelConfirmView{
		ID: strconv.FormatInt(r.ID, 10), URL: fmt.Sprintf("/reservations/%d", r.ID),
		ActionURL: fmt.Sprintf("/reservations/%d/cancel", r.ID),
		Devices:   strconv.Itoa(r.Devices()), Window: formatTime(r.Start()) + " – " + formatTime(r.End()),
		Paid: r.State != market.ReservationHeld, HasFee: fee > 0, Amount: r.AmountCents.String(),
		Fee: fee.String(), Refund: (r.AmountCents - fee).String(), FeeCents: strconv.FormatInt(int64(fee), 10),
	}
	return v, nil
}

// handleReservationCancel cancels after the confirmation page. The form
// carries the fee the buyer saw; if the fee has risen since (a deadline
// passed), the page is shown again with the new fee instead.
func (h *Handler) handleReservationCancel(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	before, err := h.db.FindBuyerReservation(c.Request().Context(), currentUser(c).ID, id)
	if err != nil {
		return err
	}
	v, err := cancelConfirmView(before, h.now())
	if err != nil {
		return err
	}
	if seen := c.FormValue("fee"); seen != "" && seen != v.FeeCents {
		v.Message = fmt.Sprintf("The fee is now %s: the free-cancellation period ended while this page was open. Confirm again to cancel at this fee.", v.Fee)
		return render(c, http.StatusConflict, views.CancelConfirm(h.page(c, fmt.Sprintf("Cancel reservation %d?", before.ID)), v))
	}
	r, err := h.cancel(c, id)
	if err != nil {
		return err
	}
	msg := "Reservation cancelled; the capacity is released."
	switch {
	case r.CancelFeeCents > 0:
		msg = fmt.Sprintf("Reservation cancelled. A %s cancellation fee applies under the offer's policy; %s is refunded to you.",
			r.CancelFeeCents, r.AmountCents-r.CancelFeeCents)
	case before.State == market.ReservationConfirmed:
		msg = fmt.Sprintf("Reservation cancelled; the capacity is released and %s is refunded to you.", r.AmountCents)
	}
	h.setFlash(c, "ok", msg)
	return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/reservations/%d", r.ID))
}

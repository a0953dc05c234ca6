package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
)

// spotBidForm is the bid form as typed. ConfirmAboveOnDemand is the
// checkbox ("1" when ticked) shown for a maximum above the on-demand price.
type spotBidForm struct {
	Devices, MaxPrice, FirstHour, LastHour string
	ConfirmAboveOnDemand                   string
}

// spotHourLayout is how the form shows and reads an hour (UTC).
const spotHourLayout = formTimeLayout

// parseSpotBid reads the form into a bid for the buyer on offerID; the
// field errors are those the form itself finds (numbers, times), the rest
// is market.ValidateSpotBid's.
func parseSpotBid(f spotBidForm, buyerID, offerID int64) (market.SpotBid, map[string]string) {
	b := market.SpotBid{BuyerID: buyerID, OfferID: offerID, ConfirmAboveOnDemand: f.ConfirmAboveOnDemand == "1"}
	errs := map[string]string{}
	if n, err := strconv.Atoi(strings.TrimSpace(f.Devices)); err != nil {
		errs["devices"] = "Enter a whole number of devices."
	} else {
		b.Devices = n
	}
	if c, err := market.ParseCents(strings.TrimSpace(f.MaxPrice)); err != nil {
		errs["max_price"] = "Enter a price in dollars, e.g. 1.80."
	} else {
		b.MaxCents = c
	}
	hour := func(field, s string, dst *time.Time) {
		t, err := time.ParseInLocation(spotHourLayout, strings.TrimSpace(s), time.UTC)
		if err != nil {
			errs[field] = "Enter an hour as YYYY-MM-DDTHH:00 (UTC)."
			return
		}
		*dst = t
	}
	hour("first_hour", f.FirstHour, &b.FirstHour)
	hour("last_hour", f.LastHour, &b.LastHour)
	return b, errs
}

// spotPanel is the spot market on the page of offer o for the viewer u at
// now, with the form as typed and its errors. Offers not selling
// interruptible capacity, or not listed, have none.
func (h *Handler) spotPanel(ctx context.Context, o market.Offer, u *market.User, listed bool, f spotBidForm, errs map[string]string, formErr string) (views.SpotPanelView, error) {
	if !o.Interruptible || o.InterruptibleCentsPerDH < 1 || !listed {
		return views.SpotPanelView{}, nil
	}
	now := h.now()
	book, err := h.db.SpotBook(ctx, o.ID)
	if err != nil {
		return views.SpotPanelView{}, err
	}
	v := views.SpotPanelView{
		Show: true, Floor: o.InterruptibleCentsPerDH.String(), Notice: fmt.Sprintf("%d minutes", o.PreemptNoticeMins),
		Live:    plural(book.LiveBids, "live bid") + " for " + plural(book.LiveDevices, "device"),
		IsOwner: u != nil && u.ID == o.ProviderID, SignedOut: u == nil,
		LoginURL: "/login?next=" + url.QueryEscape(fmt.Sprintf("/offers/%d#spot", o.ID)),
		Action:   fmt.Sprintf("/offers/%d/spot-bids", o.ID), FormError: formErr, MaxDevices: strconv.Itoa(o.Devices()),
	}
	ind, err := h.db.SpotIndicative(ctx, o.ID, now)
	if err != nil {
		return views.SpotPanelView{}, err
	}
	v.IndicativePrice, v.IndicativeHour = ind.PriceCents.String(), formatSpan(ind.Hour, ind.Hour.Add(time.Hour))
	v.IndicativeBasis, v.IndicativeNote = spotIndicativeBasis(ind), spotIndicativeNote
	if !book.Last.Hour.IsZero() {
		v.LastHour = formatSpan(book.Last.Hour, book.Last.Hour.Add(time.Hour))
		if book.Last.DevicesSold > 0 {
			v.LastPrice = book.Last.PriceCents.String()
		} else {
			v.LastPrice = "nothing sold"
		}
	}
	if u != nil && !v.IsOwner {
		m, err := h.db.DefaultPaymentMethod(ctx, u.ID)
		switch {
		case market.ErrorCode(err) == market.CodeNotFound:
			v.NeedsCard = true
		case err != nil:
			return views.SpotPanelView{}, err
		default:
			v.CardProblem = market.SpotCardProblem(m, now)
		}
	}
	if f == (spotBidForm{}) {
		// The first hour still open for bidding, for three hours.
		first := market.SpotNextHour(now, o.PreemptNoticeMins)
		f = spotBidForm{Devices: "1", MaxPrice: o.InterruptibleCentsPerDH.Decimal(),
			FirstHour: first.Format(spotHourLayout), LastHour: first.Add(2 * time.Hour).Format(spotHourLayout)}
	}
	v.Devices = views.Field{Name: "devices", Label: "Devices", Type: "number", Value: f.Devices, Error: errs["devices"],
		Help: "All or nothing: each hour you win gets all of them, or none.", Attrs: map[string]any{"min": "1", "max": v.MaxDevices}}
	v.MaxPrice = views.Field{Name: "max_price", Label: "Your maximum per device-hour (US dollars)", Type: "text", Value: f.MaxPrice, Error: errs["max_price"],
		Help: fmt.Sprintf("At least the floor, %s; at most %s (%d× the on-demand price, %s). You pay the hour's clearing price, never more than this.",
			v.Floor, market.SpotBidCeiling(o), market.SpotBidMaxMultiple, o.PriceCentsPerDeviceHour),
		Attrs: map[string]any{"inputmode": "decimal"}}
	// Above the on-demand price the buyer confirms the maximum they typed.
	if max, err := market.ParseCents(f.MaxPrice); err == nil && max > o.PriceCentsPerDeviceHour && max <= market.SpotBidCeiling(o) {
		v.Confirm = views.SpotConfirm{Show: true, Label: market.SpotAboveOnDemandText(max, o.PriceCentsPerDeviceHour),
			Checked: f.ConfirmAboveOnDemand == "1", Error: errs["confirm_above_on_demand"]}
	}
	v.FirstHour = views.Field{Name: "first_hour", Label: "First hour (UTC)", Type: "datetime-local", Value: f.FirstHour, Error: errs["first_hour"],
		Help: "A whole hour, HH:00.", Attrs: map[string]any{"step": "3600"}}
	v.LastHourF = views.Field{Name: "last_hour", Label: "Last hour (UTC), included", Type: "datetime-local", Value: f.LastHour, Error: errs["last_hour"],
		Help: "At most 7 days after the first.", Attrs: map[string]any{"step": "3600"}}
	return v, nil
}

// spotIndicativeBasis says how an indicative clearing stands.
func spotIndicativeBasis(ind store.SpotIndicative) string {
	switch {
	case ind.DevicesBid == 0:
		return "the floor: no bids at or above it yet"
	case ind.DevicesSold == 0:
		return fmt.Sprintf("the floor: %s bid, none fits the %s on sale", plural(ind.DevicesBid, "device"), plural(ind.Capacity, "device"))
	default:
		return fmt.Sprintf("%s bid for %s on sale", plural(ind.DevicesBid, "device"), plural(ind.Capacity, "device"))
	}
}

// handleSpotBid places the signed-in buyer's bid on the offer. Bad input
// re-renders the offer page with 422, the input kept and a message next
// to each field; no saved card re-renders it with the link to add one.
func (h *Handler) handleSpotBid(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	u := currentUser(c)
	f := spotBidForm{Devices: c.FormValue("devices"), MaxPrice: c.FormValue("max_price"),
		FirstHour: c.FormValue("first_hour"), LastHour: c.FormValue("last_hour"), ConfirmAboveOnDemand: c.FormValue("confirm_above_on_demand")}
	b, errs := parseSpotBid(f, u.ID, id)
	if len(errs) > 0 {
		// The market's messages for the fields that did parse, beside the form's own.
		if l, err := h.db.FindOfferByID(c.Request().Context(), id); err == nil {
			for k, msg := range market.FieldErrors(market.ValidateSpotBid(&b, l.Offer, h.now())) {
				if _, ok := errs[k]; !ok && k != "offer" {
					errs[k] = msg
				}
			}
		}
		return h.renderOfferShow(c, id, http.StatusUnprocessableEntity, f, errs, "")
	}
	b, err = h.wf.PlaceSpotBid(c.Request().Context(), b)
	if fields := market.FieldErrors(err); len(fields) > 0 {
		return h.renderOfferShow(c, id, http.StatusUnprocessableEntity, f, fields, fields["offer"])
	}
	if code := market.ErrorCode(err); err != nil && (code == market.CodeInvalid || code == market.CodeConflict) {
		status := http.StatusUnprocessableEntity
		if code == market.CodeConflict {
			status = http.StatusConflict
		}
		return h.renderOfferShow(c, id, status, f, nil, market.ErrorMessage(err))
	}
	if err != nil {
		return err
	}
	logger(c).Info("spot bid placed", "bid_id", b.ID, "offer_id", b.OfferID)
	h.setFlash(c, "ok", fmt.Sprintf("Bid #%d placed: %d devices at up to %s per device-hour, %s. Each hour is auctioned before it starts; hours you win are charged to your saved card.",
		b.ID, b.Devices, b.MaxCents, formatSpan(b.FirstHour, b.LastHour.Add(time.Hour))))
	return c.Redirect(http.StatusSeeOther, "/spot")
}

// handleSpotBids lists the signed-in buyer's bids and the hours they won.
func (h *Handler) handleSpotBids(c echo.Context) error {
	recs, err := h.db.ListBuyerSpotBids(c.Request().Context(), currentUser(c).ID)
	if err != nil {
		return err
	}
	v := views.SpotBidsView{}
	for _, r := range recs {
		v.Bids = append(v.Bids, spotBidRow(r))
	}
	return render(c, http.StatusOK, views.SpotBids(h.page(c, "Spot bids"), v))
}

func spotBidRow(r store.SpotBidRecord) views.SpotBidRow {
	b := r.Bid
	row := views.SpotBidRow{
		ID: strconv.FormatInt(b.ID, 10), Offer: r.OfferTitle, OfferURL: fmt.Sprintf("/offers/%d", b.OfferID),
		Devices: strconv.Itoa(b.Devices), Max: b.MaxCents.String(), Window: formatSpan(b.FirstHour, b.LastHour.Add(time.Hour)),
		State: b.State.Label(), Note: b.EndNote, CanCancel: b.State == market.SpotBidLive, CancelURL: fmt.Sprintf("/spot/bids/%d/cancel", b.ID),
	}
	var spent market.Cents
	won, preempted := 0, 0
	for _, h := range r.Hours {
		amount := h.AmountCents
		paid := h.State != market.ReservationHeld && h.State != market.ReservationCancelled && h.State != market.ReservationExpired
		if paid {
			spent += amount
			won++
		}
		if h.Preempted {
			preempted++
		}
		row.Hours = append(row.Hours, views.SpotHourRow{
			Hour: formatSpan(h.Hour, h.Hour.Add(time.Hour)), Devices: strconv.Itoa(h.Devices), Price: h.PriceCents.String(),
			Amount: amount.String(), ReservationURL: fmt.Sprintf("/reservations/%d", h.ReservationID),
			State: fmt.Sprintf("#%d, %s", h.ReservationID, strings.ToLower(h.State.Label())), Preempted: h.Preempted,
		})
	}
	row.HoursWon = plural(won, "hour")
	row.Spent = spent.String()
	row.Preemptions = plural(preempted, "preemption")
	return row
}

// handleSpotBidCancel stops the signed-in buyer's live bid; another
// buyer's bid is not found.
func (h *Handler) handleSpotBidCancel(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	b, err := h.wf.CancelSpotBid(c.Request().Context(), currentUser(c).ID, id)
	if err != nil {
		return err
	}
	logger(c).Info("spot bid cancelled", "bid_id", b.ID)
	h.setFlash(c, "ok", fmt.Sprintf("Bid #%d cancelled: it wins no further hours. Hours it already won stay booked.", b.ID))
	return c.Redirect(http.StatusSeeOther, "/spot")
}

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

// Resale of reserved time (market/resale.go): the seller's form and
// withdrawal, the public list and listing pages, and buying.

// resaleFromValue is how a start hour travels in the form.
const resaleFromValue = time.RFC3339

// boughtBy reports whether the resale listing l sold its time into
// reservation id: id is the time bought on resale.
func boughtBy(l market.ResaleListing, id int64) bool {
	return l.SoldReservationID == id && l.ReservationID != id
}

// boughtOnResale returns the listing whose sale made reservation id, if it
// was bought on resale.
func (h *Handler) boughtOnResale(ctx context.Context, id int64) (market.ResaleListing, bool, error) {
	ls, err := h.db.ListReservationResales(ctx, id)
	if err != nil {
		return market.ResaleListing{}, false, err
	}
	for _, l := range ls {
		if boughtBy(l, id) {
			return l, true, nil
		}
	}
	return market.ResaleListing{}, false, nil
}

// boughtOnResaleAll returns, for each of the reservations bought on
// resale, the listing whose sale made it, read in one query
// (store.ListResalesSoldInto) rather than one per row; newest first wins,
// as in boughtOnResale.
func (h *Handler) boughtOnResaleAll(ctx context.Context, rs []market.Reservation) (map[int64]market.ResaleListing, error) {
	var ids []int64
	for _, r := range rs {
		if r.ResaleOf != 0 {
			ids = append(ids, r.ID)
		}
	}
	ls, err := h.db.ListResalesSoldInto(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := map[int64]market.ResaleListing{}
	for _, l := range ls {
		if _, seen := out[l.SoldReservationID]; !seen && boughtBy(l, l.SoldReservationID) {
			out[l.SoldReservationID] = l
		}
	}
	return out, nil
}

// markBoughtOnResale marks a row as time bought on resale from listing l:
// its amount is the listing's price (its pieces' amounts are 0), and it
// names and links the listing.
func markBoughtOnResale(row *views.ReservationRow, l market.ResaleListing) {
	row.Amount = l.Price.String()
	row.Resale = &views.ResaleMark{Price: l.Price.String(), Listing: fmt.Sprintf("listing #%d", l.ID),
		ListingURL: fmt.Sprintf("/resale/%d", l.ID), From: formatTime(l.From), SoldAt: formatTime(l.SoldAt)}
}

// bookingResaleMark is the provider's booking page's link to the other
// booking of a resale, as on their Bookings list: time bought on resale
// names the booking it was bought from; a booking whose time was resold
// names the hour and the booking bought from it. Both are on the
// provider's offers. "" when there is none.
func (h *Handler) bookingResaleMark(ctx context.Context, r market.Reservation) (text, otherID string, err error) {
	switch {
	case r.ResaleOf != 0:
		return "bought on resale from", strconv.FormatInt(r.ResaleOf, 10), nil
	case !r.ResoldAt.IsZero():
		ls, err := h.db.ListReservationResales(ctx, r.ID)
		if err != nil {
			return "", "", err
		}
		for _, l := range ls {
			if l.ReservationID == r.ID && l.State == market.ListingSold && l.SoldReservationID != 0 {
				return "from " + formatTime(r.ResoldAt) + " to", strconv.FormatInt(l.SoldReservationID, 10), nil
			}
		}
	}
	return "", "", nil
}

// resalePanel is the reservation page's resale card for its holder.
func (h *Handler) resalePanel(ctx context.Context, userID int64, r market.Reservation, now time.Time) (views.ResalePanelView, error) {
	v := views.ResalePanelView{}
	ls, err := h.db.ListReservationResales(ctx, r.ID)
	if err != nil {
		return v, err
	}
	for _, l := range ls {
		if boughtBy(l, r.ID) {
			v.Show = true
			v.BoughtFrom = fmt.Sprintf("You bought this time on resale for %s on %s (listing #%d). It runs under the original booking's contract; the provider's SLA applies as booked.",
				l.Price, formatTime(l.SoldAt), l.ID)
			v.Money = append(v.Money, views.ResaleMoneyRow{Kind: "Payment", What: "Charged to your saved card", Amount: l.Price.String()})
			if l.SLACredit > 0 {
				state := "being refunded"
				if l.SLACreditDone {
					state = "refunded"
				}
				v.Money = append(v.Money, views.ResaleMoneyRow{Kind: "Refund", What: "SLA credits for incidents in your hours, " + state + " to your card", Amount: l.SLACredit.String()})
			}
			v.Paid = l.Price.String()
			continue
		}
		if l.ReservationID != r.ID {
			continue
		}
		v.Show = true
		row := views.ResaleListingRow{URL: fmt.Sprintf("/resale/%d", l.ID), Status: l.StatusLabel(r, now),
			Label: fmt.Sprintf("Listing #%d: from %s for %s", l.ID, formatTime(l.From), l.Price)}
		if l.State == market.ListingOpen {
			row.WithdrawURL = fmt.Sprintf("/resale/%d/withdraw", l.ID)
		}
		if l.State == market.ListingSold {
			credit, state := "being refunded to your card", "being refunded"
			if l.CreditDone {
				credit, state = "refunded to your card", "refunded"
			}
			row.Detail = fmt.Sprintf("Sold on %s for %s: platform fee %s, %s %s.", formatTime(l.SoldAt), l.Price, l.Fee, l.Credit, credit)
			v.Resold = fmt.Sprintf("Your time from %s was sold; your access ends then. The provider is paid as for your booking.", formatTime(l.From))
			if l.SLACredit > 0 {
				v.Resold += fmt.Sprintf(" %s of SLA credits for incidents in the hours you sold went to the buyer.", l.SLACredit)
			}
			v.Money = append(v.Money,
				views.ResaleMoneyRow{Kind: "Resale", What: "Paid by the buyer", Amount: l.Price.String()},
				views.ResaleMoneyRow{Kind: "Platform fee", What: "Out of the price", Amount: "−" + l.Fee.String()},
				views.ResaleMoneyRow{Kind: "Refund", What: "Your credit, " + state + " to the card you paid with", Amount: l.Credit.String()})
		}
		v.Listings = append(v.Listings, row)
	}
	if r.BuyerID != userID {
		return v, nil
	}
	if err := market.CanResell(r); err != nil {
		if r.State == market.ReservationConfirmed || r.State == market.ReservationActive {
			v.Show, v.Why = true, market.ErrorMessage(err)
		}
		return v, nil
	}
	for _, l := range ls {
		if l.ReservationID == r.ID && l.Live(r, now) {
			return v, nil // withdraw it to list again
		}
	}
	v.Show = true
	if len(market.ResaleFromChoices(r, now)) == 0 {
		v.Why = "No whole hour of this reservation is far enough ahead to sell."
		return v, nil
	}
	v.SellURL = fmt.Sprintf("/reservations/%d/resale", r.ID)
	return v, nil
}

// resaleAdjust fits the reservation page to a reservation a resale ties
// to another (market.ResaleLocked): it cannot be cancelled or rejected;
// time bought on resale shows what was paid for it; a reservation sold
// whole before its start has no machines for its holder.
func resaleAdjust(r market.Reservation, v *views.ReservationView) {
	if market.ResaleLocked(r) == nil {
		return
	}
	v.CanCancel, v.Reject = false, views.RejectPanelView{}
	if r.ResaleOf != 0 && v.Resale.Paid != "" {
		v.Row.Amount = v.Resale.Paid
		v.Billing.PaymentStatus = "Paid " + v.Resale.Paid + " on resale with your saved card. The original booking's payment covers the provider."
		v.Billing.PayURL = ""
	}
	if r.ResaleOf != 0 {
		// The resale's own terms: one price for all of it, no cancellation
		// and no rejection (ResaleLocked), not the original booking's.
		for i := range v.Pieces {
			v.Pieces[i].Amount = "in the resale price"
			if v.Resale.Paid != "" {
				v.Pieces[i].Amount = "in the " + v.Resale.Paid + " resale price"
			}
			v.Pieces[i].Cancellation = "Bought on resale: cannot be cancelled or rejected."
			v.Pieces[i].Acceptance = ""
		}
	}
	if !r.ResoldAt.IsZero() && !r.ResoldAt.After(r.Start()) {
		v.Access = views.ReservationAccessView{}
	}
}

// handleResaleForm shows the seller's form.
func (h *Handler) handleResaleForm(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	return h.resaleForm(c, id, "", "", nil)
}

// handleResaleCreate lists the remaining time of the user's reservation.
func (h *Handler) handleResaleCreate(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	fromText, priceText := strings.TrimSpace(c.FormValue("from")), strings.TrimSpace(c.FormValue("price"))
	fields := map[string]string{}
	from, ferr := time.Parse(resaleFromValue, fromText)
	if ferr != nil {
		fields["from"] = "Choose the hour to sell from."
	}
	price, perr := market.ParseCents(priceText)
	if perr != nil {
		fields["price"] = "Enter the price in dollars, e.g. 99.50."
	}
	if len(fields) > 0 {
		return h.resaleForm(c, id, fromText, priceText, &market.Error{Code: market.CodeInvalid, Message: "Check the form.", Fields: fields})
	}
	l, err := h.wf.ListRemainingTime(c.Request().Context(), currentUser(c).ID, id, from.UTC(), price)
	if err != nil {
		return h.resaleForm(c, id, fromText, priceText, err)
	}
	logger(c).Info("resale listed", "listing_id", l.ID, "reservation_id", id, "price_cents", int64(l.Price))
	h.setFlash(c, "ok", fmt.Sprintf("Listed for %s from %s. You can withdraw it until it sells.", l.Price, formatTime(l.From)))
	return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/resale/%d", l.ID))
}

// resaleForm renders the seller's form with what was typed and err: 422
// with messages by the fields for bad input, 409 when the reservation
// cannot be listed; another user's reservation is not found.
func (h *Handler) resaleForm(c echo.Context, id int64, fromText, priceText string, err error) error {
	ctx := c.Request().Context()
	u := currentUser(c)
	r, ferr := h.db.FindBuyerReservation(ctx, u.ID, id)
	if ferr != nil {
		return ferr
	}
	now := h.now()
	terms, ferr := h.db.FindResaleTerms(ctx, u.ID, id, now)
	if ferr != nil {
		return ferr
	}
	v := views.ResaleFormView{
		ReservationID: strconv.FormatInt(id, 10), ReservationURL: fmt.Sprintf("/reservations/%d", id),
		Window: formatSpan(r.Start(), r.End()), Action: fmt.Sprintf("/reservations/%d/resale", id),
		From: fromText, Price: priceText, Errors: market.FieldErrors(err), CanList: terms.Err == nil,
	}
	var caps []string
	for i, t := range terms.Choices {
		v.FromOptions = append(v.FromOptions, views.Option{Value: t.Format(resaleFromValue),
			Label: fmt.Sprintf("%s (%s left)", formatTime(t), plural(int(r.End().Sub(t)/time.Hour), "hour"))})
		caps = append(caps, fmt.Sprintf("%s from %s", terms.Caps[i], formatTime(t)))
	}
	if v.From == "" && len(terms.Choices) > 0 {
		v.From = terms.Choices[0].Format(resaleFromValue)
	}
	if len(caps) > 0 {
		v.CapText = "At most what you paid for the time sold: " + strings.Join(caps, "; ") + "."
	}
	fee := h.wf.PlatformFeeBP()
	v.FeeText = fmt.Sprintf("The platform keeps %s%% of the price; the rest is refunded to the card you paid with once it sells.", market.FormatPercentBP(fee))
	if p, perr := market.ParseCents(priceText); perr == nil && p > 0 {
		f, credit := market.ResaleSplit(p, fee)
		v.FeeText = fmt.Sprintf("At %s the platform keeps %s (%s%%) and %s is refunded to the card you paid with once it sells.", p, f, market.FormatPercentBP(fee), credit)
	}
	status := http.StatusOK
	switch code := market.ErrorCode(err); {
	case err == nil:
		if terms.Err != nil {
			v.Message = market.ErrorMessage(terms.Err)
		}
	case code == market.CodeInvalid:
		status = http.StatusUnprocessableEntity
		if len(v.Errors) == 0 {
			v.Message = market.ErrorMessage(err)
		}
	case code == market.CodeConflict:
		status, v.Message = http.StatusConflict, market.ErrorMessage(err)
	default:
		return err
	}
	return render(c, status, views.ResaleForm(h.page(c, fmt.Sprintf("Sell reservation %d", id)), v))
}

// handleResaleWithdraw withdraws the user's own open listing.
func (h *Handler) handleResaleWithdraw(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	l, err := h.wf.WithdrawResale(c.Request().Context(), currentUser(c).ID, id)
	if err != nil {
		return err
	}
	h.setFlash(c, "ok", fmt.Sprintf("Listing #%d withdrawn.", l.ID))
	return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/reservations/%d", l.ReservationID))
}

// resaleCard describes a listing for buyers.
func resaleCard(ro store.ResaleOffer) views.ResaleCard {
	l, r := ro.Listing, ro.Reservation
	c := views.ResaleCard{URL: fmt.Sprintf("/resale/%d", l.ID)}
	var titles, accs, regions, terms []string
	seen := map[string]bool{}
	addOnce := func(list *[]string, s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			*list = append(*list, s)
		}
	}
	pieces := market.ResalePieces(r, l.From)
	for _, p := range pieces {
		o := ro.Offers[p.OfferID]
		addOnce(&titles, o.Title)
		acc := o.AcceleratorID
		if a, ok := market.FindAccelerator(o.AcceleratorID); ok {
			acc = a.Vendor + " " + a.Name
		}
		addOnce(&accs, acc)
		reg := o.RegionID
		if rg, ok := market.FindRegion(o.RegionID); ok {
			reg = rg.Name
		}
		addOnce(&regions, reg)
		addOnce(&terms, contractText(p))
	}
	devices := r.Devices()
	c.Title, c.Accelerator, c.Region = strings.Join(titles, " + "), strings.Join(accs, ", "), strings.Join(regions, ", ")
	c.Devices, c.Window = strconv.Itoa(devices), formatSpan(l.From, r.End())
	c.Hours = plural(int(r.End().Sub(l.From)/time.Hour), "hour")
	c.Price = l.Price.String()
	if perDH, ok := market.ResalePricePerDeviceHour(l.Price, pieces); ok {
		c.PerDeviceHr = perDH.String()
	}
	c.Terms = strings.Join(terms, " ")
	return c
}

// contractText is a piece's frozen SLA terms in words.
func contractText(p market.ReservationPiece) string {
	t := p.Terms
	s := fmt.Sprintf("%s; %s%% uptime guaranteed", t.BillingBasis.Label(), market.FormatPercentBP(t.UptimeBP))
	if t.CreditCapBP > 0 {
		s += fmt.Sprintf(", SLA credits up to %s%%", market.FormatPercentBP(t.CreditCapBP))
	}
	return s + "."
}

// resaleRules is the rule people meet on the resale pages.
func resaleRules() string { return views.ResaleRules }

// resaleCards are the listings that can be bought now, as cards.
func (h *Handler) resaleCards(ctx context.Context) ([]views.ResaleCard, error) {
	ros, err := h.db.ListOpenResaleOffers(ctx, h.now())
	if err != nil {
		return nil, err
	}
	var out []views.ResaleCard
	for _, ro := range ros {
		out = append(out, resaleCard(ro))
	}
	return out, nil
}

// handleResaleList is /resale: the listings that can be bought now.
func (h *Handler) handleResaleList(c echo.Context) error {
	cards, err := h.resaleCards(c.Request().Context())
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.ResaleList(h.page(c, "Resale"), views.ResaleListView{Rules: resaleRules(), Cards: cards}))
}

// handleResaleShow is one listing with its contract and the Buy button.
func (h *Handler) handleResaleShow(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	return h.resaleShow(c, id, nil)
}

// resaleShow renders a listing; err is why buying failed (422 when the
// buyer must add a card first, 409 when it is no longer for sale).
func (h *Handler) resaleShow(c echo.Context, id int64, err error) error {
	ctx := c.Request().Context()
	ro, ferr := h.db.FindResaleOffer(ctx, id)
	if ferr != nil {
		return ferr
	}
	now := h.now()
	l, r := ro.Listing, ro.Reservation
	v := views.ResaleShowView{ID: strconv.FormatInt(l.ID, 10), Card: resaleCard(ro), Status: l.StatusLabel(r, now), Live: l.Live(r, now),
		BuyAction: fmt.Sprintf("/resale/%d/buy", l.ID), Rules: resaleRules(), AddCardURL: "/account"}
	for _, p := range market.ResalePieces(r, l.From) {
		v.Pieces = append(v.Pieces, views.ResalePieceRow{OfferTitle: ro.Offers[p.OfferID].Title, OfferURL: fmt.Sprintf("/offers/%d", p.OfferID),
			Devices: strconv.Itoa(p.Devices), Window: formatSpan(p.Start, p.End), Terms: contractText(p),
			Cancellation: market.CancellationPolicyText(p.FreeCancelHours, p.CancelFeeBP) + " Time bought on resale cannot be cancelled."})
	}
	u := currentUser(c)
	switch {
	case u == nil:
		v.SignInURL = "/login?next=" + url.QueryEscape(fmt.Sprintf("/resale/%d", l.ID))
	case u.ID == l.SellerID:
		v.Own = true
	default:
		m, merr := h.db.DefaultPaymentMethod(ctx, u.ID)
		switch {
		case merr == nil:
			v.PaymentLabel, v.CanBuy = m.Label, true
		case market.ErrorCode(merr) != market.CodeNotFound:
			return merr
		}
	}
	status := http.StatusOK
	if err != nil {
		switch market.ErrorCode(err) {
		case market.CodeInvalid:
			status = http.StatusUnprocessableEntity
		case market.CodeConflict:
			status = http.StatusConflict
		default:
			return err
		}
		v.Message = market.ErrorMessage(err)
		if v.PaymentLabel != "" {
			v.AddCardURL = ""
		}
	}
	return render(c, status, views.ResaleShow(h.page(c, fmt.Sprintf("Resale listing %d", l.ID)), v))
}

// handleResaleBuy buys a listing with the user's saved card.
func (h *Handler) handleResaleBuy(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	n, err := h.wf.BuyResale(c.Request().Context(), currentUser(c).ID, id)
	if err != nil {
		if code := market.ErrorCode(err); code == market.CodeInvalid || code == market.CodeConflict {
			return h.resaleShow(c, id, err)
		}
		return err
	}
	logger(c).Info("resale bought", "listing_id", id, "reservation_id", n.ID)
	h.setFlash(c, "ok", fmt.Sprintf("Bought. Reservation #%d is yours from %s.", n.ID, formatTime(n.Start())))
	return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/reservations/%d", n.ID))
}

// resaleSources are the listings that answer req, as cards for the quote
// results.
func (h *Handler) resaleSources(ctx context.Context, req market.Request) ([]views.ResaleCard, error) {
	ros, err := h.wf.ResaleSources(ctx, req)
	if err != nil {
		return nil, err
	}
	var out []views.ResaleCard
	for _, ro := range ros {
		out = append(out, resaleCard(ro))
	}
	return out, nil
}

// joinSentences joins two sentences with a space, either may be empty.
func joinSentences(a, b string) string {
	return strings.TrimSpace(a + " " + b)
}

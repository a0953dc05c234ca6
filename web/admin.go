package web

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
)

func (h *Handler) handleAdminOffers(c echo.Context) error {
	ctx := c.Request().Context()
	now := h.now()
	rows, err := h.db.ListOffersForReview(ctx)
	if err != nil {
		return err
	}
	records, err := h.db.ProviderRecords(ctx, now)
	if err != nil {
		return err
	}
	offers := make([]market.Offer, len(rows))
	for i, l := range rows {
		offers[i] = l.Offer
	}
	flags, err := h.wf.RedFlags(ctx, offers, records)
	if err != nil {
		return err
	}
	v := views.AdminReviewView{}
	for _, l := range rows {
		o := l.Offer
		id := strconv.FormatInt(o.ID, 10)
		rec := records[o.ProviderID]
		row := views.ReviewRow{
			ID: id, Title: o.Title, URL: "/offers/" + id, Provider: providerName(l), Summary: offerSummary(o),
			Price: o.PriceCentsPerDeviceHour.String(), Submitted: formatTime(o.UpdatedAt), Action: "/admin/offers/" + id + "/review",
			VerifyAction: "/admin/offers/" + id + "/verify",
			Listed:       listedVersion(l.Listed),
			Record: fmt.Sprintf("%d approved offers · %d delivered bookings · %d incidents in %d days · reliability %s%%",
				rec.ApprovedOffers, rec.DeliveredReservations, rec.RecentIncidents, int(market.ReliabilityWindow/(24*time.Hour)),
				market.FormatPercentBP(market.ReliabilityBP(rec))),
		}
		for _, f := range flags[o.ID] {
			row.Flags = append(row.Flags, views.RedFlag{Code: string(f.Code), Label: f.Code.Label(), Message: f.Message})
		}
		for _, fk := range market.FigureKinds {
			if f, ok := o.Figure(fk.Kind); ok {
				row.Figures = append(row.Figures, views.ReviewFigure{Kind: string(fk.Kind), Label: fk.Label,
					Value: market.FormatFigure(fk.Kind, f.Value), Basis: string(f.Basis), Method: orDash(f.Method),
					Verified: f.Basis == market.FigureVerified})
			}
		}
		v.Rows = append(v.Rows, row)
	}
	return render(c, http.StatusOK, views.AdminReview(h.page(c, "Review queue"), v))
}

// listedVersion says in a line the version of an offer on the market while
// an edit of it waits for review ("" when there is none).
func listedVersion(o market.Offer) string {
	if o.ID == 0 {
		return ""
	}
	return fmt.Sprintf("“%s”, %s at %s per device-hour", o.Title, offerSummary(o), o.PriceCentsPerDeviceHour)
}

func (h *Handler) handleAdminReview(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	decision := market.ReviewState(c.FormValue("decision"))
	o, err := h.wf.DecideOffer(c.Request().Context(), currentUser(c).ID, id, decision, c.FormValue("note"))
	if market.ErrorCode(err) == market.CodeInvalid {
		h.setFlash(c, "error", market.ErrorMessage(err))
		return c.Redirect(http.StatusSeeOther, "/admin/offers")
	}
	if err != nil {
		return err
	}
	logger(c).Info("offer reviewed", "offer_id", id, "decision", decision, "admin_id", currentUser(c).ID)
	h.setFlash(c, "ok", fmt.Sprintf("“%s” %s.", o.Title, map[market.ReviewState]string{
		market.ReviewApproved:         "approved",
		market.ReviewRejected:         "rejected",
		market.ReviewChangesRequested: "sent back with a request for changes",
	}[decision]))
	return c.Redirect(http.StatusSeeOther, "/admin/offers")
}

func (h *Handler) handleAdminVerifyFigure(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	kind := market.FigureKind(c.FormValue("kind"))
	err = h.wf.VerifyFigure(c.Request().Context(), currentUser(c).ID, id, kind, c.FormValue("note"))
	if market.ErrorCode(err) == market.CodeInvalid {
		h.setFlash(c, "error", market.ErrorMessage(err))
		return c.Redirect(http.StatusSeeOther, safeBack(c, "/admin/offers"))
	}
	if err != nil {
		return err
	}
	logger(c).Info("figure verified", "offer_id", id, "kind", kind, "admin_id", currentUser(c).ID)
	h.setFlash(c, "ok", "Figure marked verified.")
	return c.Redirect(http.StatusSeeOther, safeBack(c, "/admin/offers"))
}

// safeBack is where a form posted from several pages returns: its "back"
// field when that is a path on this site, else fallback.
func safeBack(c echo.Context, fallback string) string {
	if b := c.FormValue("back"); b != "" && safeNext(b) == b {
		return b
	}
	return fallback
}

func (h *Handler) handleAdminProviders(c echo.Context) error {
	ctx := c.Request().Context()
	ps, err := h.db.ListProviders(ctx, h.now())
	if err != nil {
		return err
	}
	flags, err := h.db.ListOpenReservationFlags(ctx)
	if err != nil {
		return err
	}
	since := h.now().Add(-market.RejectLimitWindow)
	provRej, err := h.db.CountProviderRejections(ctx, since)
	if err != nil {
		return err
	}
	buyerRej, err := h.db.CountBuyerRejections(ctx, since)
	if err != nil {
		return err
	}
	contradictions, err := h.db.CountProviderContradictions(ctx, h.now().AddDate(0, 0, -market.ObservationWindowDays))
	if err != nil {
		return err
	}
	v := views.AdminProvidersView{}
	for id, n := range buyerRej {
		u, err := h.db.FindUserByID(ctx, id)
		if err != nil {
			return err
		}
		v.Buyers = append(v.Buyers, views.AdminRejectionRow{ID: strconv.FormatInt(id, 10), Name: u.DisplayName, Email: u.Email,
			Rejections: rejectionCountText(n), Limited: n.Unfounded >= market.RejectLimit})
	}
	sort.Slice(v.Buyers, func(i, j int) bool { return v.Buyers[i].Email < v.Buyers[j].Email })
	for _, p := range ps {
		id := strconv.FormatInt(p.User.ID, 10)
		r := p.Record
		row := views.AdminProviderRow{
			ID: id, Name: p.User.DisplayName, Email: p.User.Email, Org: p.User.Organisation,
			Offers: strconv.Itoa(p.Offers), Approved: strconv.Itoa(r.ApprovedOffers), Delivered: strconv.Itoa(r.DeliveredReservations),
			Incidents: strconv.Itoa(r.RecentIncidents), Disputes: strconv.Itoa(r.UpheldDisputes),
			Reliability: market.FormatPercentBP(market.ReliabilityBP(r)) + "%", Clean: r.CleanTrackRecord(),
			Suspended: p.User.Suspended, SuspensionReason: p.SuspensionReason, SuspendedAt: formatTime(p.SuspendedAt),
			SuspendAction: "/admin/providers/" + id + "/suspend", ReinstateAction: "/admin/providers/" + id + "/reinstate",
			Rejections:     rejectionCountText(provRej[p.User.ID]),
			Contradictions: strconv.Itoa(contradictions[p.User.ID]),
		}
		v.Providers = append(v.Providers, row)
	}
	for _, f := range flags {
		id := strconv.FormatInt(f.ID, 10)
		v.Flags = append(v.Flags, views.AdminFlagRow{
			ID: id, Reservation: fmt.Sprintf("#%d", f.ReservationID), URL: fmt.Sprintf("/admin/reservations/%d", f.ReservationID),
			Buyer: f.BuyerName, State: f.State.Label(), Amount: f.AmountCents.String(), Reason: f.Reason, Flagged: formatTime(f.CreatedAt),
			ClearAction: "/admin/flags/" + id + "/clear",
		})
	}
	return render(c, http.StatusOK, views.AdminProviders(h.page(c, "Providers"), v))
}

// rejectionCountText is "3 (2 unfounded)".
func rejectionCountText(n store.RejectionCount) string {
	return fmt.Sprintf("%d (%d unfounded)", n.Total, n.Unfounded)
}

func (h *Handler) handleAdminSuspend(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	s, err := h.wf.SuspendProvider(c.Request().Context(), currentUser(c).ID, id, c.FormValue("reason"))
	if market.ErrorCode(err) == market.CodeInvalid {
		h.setFlash(c, "error", market.ErrorMessage(err))
		return c.Redirect(http.StatusSeeOther, "/admin/providers")
	}
	if err != nil {
		return err
	}
	h.setFlash(c, "ok", fmt.Sprintf("Provider suspended: %d offer(s) unlisted, %d open reservation(s) flagged for review, %d API token(s) and %d host token(s) revoked.", len(s.OfferIDs), s.Flagged, s.RevokedTokens, s.RevokedHostTokens))
	return c.Redirect(http.StatusSeeOther, "/admin/providers")
}

func (h *Handler) handleAdminReinstate(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	if err := h.wf.ReinstateProvider(c.Request().Context(), currentUser(c).ID, id, c.FormValue("note")); err != nil {
		return err
	}
	h.setFlash(c, "ok", "Provider reinstated; their approved offers are listed again.")
	return c.Redirect(http.StatusSeeOther, "/admin/providers")
}

func (h *Handler) handleAdminClearFlag(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	if err := h.wf.ClearReservationFlag(c.Request().Context(), currentUser(c).ID, id, c.FormValue("note")); err != nil {
		return err
	}
	h.setFlash(c, "ok", "Flag cleared.")
	return c.Redirect(http.StatusSeeOther, "/admin/providers")
}

// auditPageSize is how many audit entries one page shows.
const auditPageSize = 100

func (h *Handler) handleAdminAudit(c echo.Context) error {
	q := c.QueryParams()
	fv := views.AuditFilter{Actor: q.Get("actor"), Action: q.Get("action"), Subject: q.Get("subject"),
		SubjectID: q.Get("subject_id"), From: q.Get("from"), To: q.Get("to")}
	f := store.AuditFilter{Action: strings.TrimSpace(fv.Action), SubjectKind: strings.TrimSpace(fv.Subject), Limit: auditPageSize}
	errs := map[string]string{}
	parseID := func(field, s string, dst *int64) {
		if s = strings.TrimSpace(s); s == "" {
			return
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			errs[field] = "Enter a number."
			return
		}
		*dst = n
	}
	parseID("actor", fv.Actor, &f.ActorID)
	parseID("subject_id", fv.SubjectID, &f.SubjectID)
	parseDate := func(field, s string, dst *time.Time, endOfDay bool) {
		if s = strings.TrimSpace(s); s == "" {
			return
		}
		t, err := time.Parse("2006-01-02", s)
		if err != nil {
			errs[field] = "Enter a date as YYYY-MM-DD."
			return
		}
		if endOfDay {
			t = t.AddDate(0, 0, 1) // the To day is included: [From, To+1d)
		}
		*dst = t
	}
	parseDate("from", fv.From, &f.From, false)
	parseDate("to", fv.To, &f.To, true)
	page, err := pageNumber(q.Get("page"))
	if err != nil {
		return err
	}
	f.Offset = (page - 1) * auditPageSize

	v := views.AuditView{Filter: fv, Errors: errs, Actions: auditActionOptions()}
	status := http.StatusOK
	if len(errs) > 0 {
		status = http.StatusUnprocessableEntity
		return render(c, status, views.AdminAudit(h.page(c, "Audit trail"), v))
	}
	entries, total, err := h.db.ListAudit(c.Request().Context(), f)
	if err != nil {
		return err
	}
	for _, e := range entries {
		v.Entries = append(v.Entries, auditRow(e))
	}
	v.Total = fmt.Sprintf("%d entries", total)
	if total == 1 {
		v.Total = "1 entry"
	}
	pageURL := func(n int) string {
		q2 := url.Values{}
		for k, vals := range q {
			if k != "page" && len(vals) > 0 && vals[0] != "" {
				q2.Set(k, vals[0])
			}
		}
		q2.Set("page", strconv.Itoa(n))
		return "/admin/audit?" + q2.Encode()
	}
	if page > 1 {
		v.PrevURL = pageURL(page - 1)
	}
	if f.Offset+len(entries) < total {
		v.NextURL = pageURL(page + 1)
	}
	return render(c, status, views.AdminAudit(h.page(c, "Audit trail"), v))
}

// auditRow is one audit entry as the trail shows it: the action and
// subject in words, what happened in a line (for money, which way it
// went), the recorded before and after kept for whoever opens them.
func auditRow(e store.AuditEntry) views.AuditRow {
	actor := "system"
	if e.ActorID != 0 {
		actor = fmt.Sprintf("%s (#%d)", e.ActorName, e.ActorID)
	}
	row := views.AuditRow{At: formatTime(e.At), Actor: actor, Action: store.AuditActionLabel(e.Action), ActionCode: e.Action,
		Subject: store.AuditSubjectLabel(e.SubjectKind, e.SubjectID), Summary: e.Note, Before: e.Before, After: e.After}
	if le, ok := store.AuditMoneyEntry(e); ok {
		row.Money, row.Summary, row.Amount, row.Ref = true, le.Describe(""), le.Amount.String(), le.StripeRef
	}
	return row
}

func auditActionOptions() []views.Option {
	opts := []views.Option{{Value: "", Label: "Any action"}}
	for _, a := range []string{
		store.AuditOfferApprove, store.AuditOfferAutoApprove, store.AuditOfferReject, store.AuditOfferRequestChanges,
		store.AuditFigureVerify, store.AuditProviderSuspend, store.AuditProviderReinstate, store.AuditReservationFlagClear,
		store.AuditDisputeDecide, store.AuditReplacementTrigger,
	} {
		opts = append(opts, views.Option{Value: a, Label: store.AuditActionLabel(a)})
	}
	return append(opts, views.Option{Value: store.AuditMoneyPrefix, Label: "Any movement of money"})
}

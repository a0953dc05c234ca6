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

// incidentInput is the incident form as posted.
type incidentInput struct {
	Piece, Kind, Start, End, Devices, Degradation, Note string
}

func parseIncidentForm(c echo.Context) incidentInput {
	return incidentInput{
		Piece: c.FormValue("piece"), Kind: c.FormValue("kind"), Start: c.FormValue("start"), End: c.FormValue("end"),
		Devices: c.FormValue("devices_affected"), Degradation: c.FormValue("degradation"), Note: c.FormValue("note"),
	}
}

// incident turns the form into a market incident, with a message per field
// it could not read (ValidateIncident checks the rest).
func (in incidentInput) incident() (market.Incident, market.Problems) {
	p := market.Problems{}
	inc := market.Incident{Kind: market.IncidentKind(in.Kind), Note: in.Note}
	var err error
	if in.Piece != "" {
		if inc.PieceID, err = strconv.ParseInt(in.Piece, 10, 64); err != nil || inc.PieceID < 1 {
			p.Add("piece", "Choose a piece from the list.")
		}
	}
	if in.Start != "" {
		if inc.Start, err = time.Parse(formTimeLayout, in.Start); err != nil {
			p.Add("start", "Enter the start as a date and time (UTC).")
		}
	}
	if in.End != "" {
		if inc.End, err = time.Parse(formTimeLayout, in.End); err != nil {
			p.Add("end", "Enter the end as a date and time (UTC).")
		}
	}
	if inc.DevicesAffected, err = strconv.Atoi(strings.TrimSpace(in.Devices)); err != nil {
		p.Add("devices_affected", "Enter how many devices were affected.")
	}
	if d := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(in.Degradation), "%")); d != "" {
		// A percentage with up to two decimals is a count of basis points.
		bp, err := market.ParseCents(d)
		if err != nil {
			p.Add("degradation", "Enter the severity as a percentage, e.g. 50.")
		}
		inc.DegradationBP = int(bp)
	}
	return inc, p
}

// incidentFormView builds the report form for the pieces a reporter may report on.
func incidentFormView(r market.Reservation, pieces []market.ReservationPiece, action, back string, provider bool, in incidentInput, err error) views.IncidentFormView {
	v := views.IncidentFormView{
		Title: fmt.Sprintf("Report an incident on reservation #%d", r.ID), Action: action, BackURL: back,
		Intro: "Your report waits for the provider's acknowledgement; unacknowledged after 72 hours, it goes to the admins as a dispute.",
		Order: []string{"piece", "kind", "start", "end", "devices_affected", "degradation", "note"},
	}
	if provider {
		v.Intro = "Your report applies at once and counts in settlement under the offer's terms."
	}
	for _, p := range pieces {
		v.Pieces = append(v.Pieces, views.Option{Value: strconv.FormatInt(p.ID, 10),
			Label: fmt.Sprintf("%s, %s – %s", plural(p.Devices, "device"), formatTime(p.Start), formatTime(p.End))})
	}
	for _, k := range market.IncidentKinds {
		v.Kinds = append(v.Kinds, views.Option{Value: string(k), Label: k.Label() + " — " + k.Remedy()})
	}
	if in.Start == "" && len(pieces) > 0 {
		in.Start, in.End, in.Devices = pieces[0].Start.Format(formTimeLayout), pieces[0].End.Format(formTimeLayout), "1"
	}
	fe := market.FieldErrors(err)
	v.Errors = fe
	v.Piece = views.Field{Name: "piece", Label: "Piece", Value: in.Piece, Error: fe["piece"]}
	v.Kind = views.Field{Name: "kind", Label: "What happened", Value: in.Kind, Error: fe["kind"]}
	v.Start = views.Field{Name: "start", Label: "Started (UTC)", Type: "datetime-local", Value: in.Start, Error: fe["start"]}
	v.End = views.Field{Name: "end", Label: "Ended (UTC)", Type: "datetime-local", Value: in.End, Error: fe["end"],
		Help: "For a preemption, the end of the booking."}
	v.Devices = views.Field{Name: "devices_affected", Label: "Devices affected", Type: "number", Value: in.Devices, Error: fe["devices_affected"]}
	v.Degrade = views.Field{Name: "degradation", Label: "Severity % (network degradation or underperformance)", Type: "text", Value: in.Degradation,
		Error: fe["degradation"], Help: fmt.Sprintf("For a network, empty means %s%%; for underperformance, how far below the guaranteed figure.",
			market.FormatPercentBP(market.NetworkDegradationCreditBP))}
	v.Note = views.Field{Name: "note", Label: "Evidence", Value: in.Note, Error: fe["note"],
		Help: "What happened: logs, error messages, ticket numbers."}
	return v
}

// reportIncident stores a report from the form, or re-renders the form
// with 422 and the input kept.
func (h *Handler) reportIncident(c echo.Context, r market.Reservation, pieces []market.ReservationPiece, by, action, back string) error {
	in := parseIncidentForm(c)
	inc, problems := in.incident()
	err := problems.Err()
	if err == nil {
		_, err = h.wf.ReportIncident(c.Request().Context(), store.Incident{Incident: inc, ReservationID: r.ID,
			ReportedBy: by, ReporterID: currentUser(c).ID})
	}
	if market.ErrorCode(err) == market.CodeInvalid {
		v := incidentFormView(r, pieces, action, back, by == store.ReportedByProvider, in, err)
		return render(c, http.StatusUnprocessableEntity, views.IncidentForm(h.page(c, v.Title), v))
	}
	if err != nil {
		return err
	}
	logger(c).Info("incident reported", "reservation_id", r.ID, "by", by, "kind", inc.Kind)
	msg := "Incident reported; it applies at once."
	if by == store.ReportedByBuyer {
		msg = "Incident reported; it counts once the provider acknowledges it."
	}
	h.setFlash(c, "ok", msg)
	return c.Redirect(http.StatusSeeOther, back)
}

func (h *Handler) handleBuyerIncidentForm(c echo.Context) error {
	r, err := h.buyerReservation(c)
	if err != nil {
		return err
	}
	back := fmt.Sprintf("/reservations/%d", r.ID)
	held := market.HeldPieces(r) // not the hours sold on resale
	if len(held) == 0 {
		return market.Errorf(market.CodeConflict, "You sold this reservation's time on resale: incidents in it are reported by its buyer, on their reservation.")
	}
	v := incidentFormView(r, held, back+"/incidents", back, false, incidentInput{}, nil)
	return render(c, http.StatusOK, views.IncidentForm(h.page(c, v.Title), v))
}

func (h *Handler) handleBuyerIncident(c echo.Context) error {
	r, err := h.buyerReservation(c)
	if err != nil {
		return err
	}
	back := fmt.Sprintf("/reservations/%d", r.ID)
	return h.reportIncident(c, r, market.HeldPieces(r), store.ReportedByBuyer, back+"/incidents", back)
}

func (h *Handler) buyerReservation(c echo.Context) (market.Reservation, error) {
	id, err := pathID(c)
	if err != nil {
		return market.Reservation{}, err
	}
	return h.db.FindBuyerReservation(c.Request().Context(), currentUser(c).ID, id)
}

// providerReservation returns a reservation with at least one piece on the
// provider's offers, and those pieces; any other is not found.
func (h *Handler) providerReservation(c echo.Context) (market.Reservation, []market.ReservationPiece, error) {
	id, err := pathID(c)
	if err != nil {
		return market.Reservation{}, nil, err
	}
	r, err := h.db.FindReservation(c.Request().Context(), id)
	if err != nil {
		return market.Reservation{}, nil, err
	}
	var mine []market.ReservationPiece
	for _, p := range r.Pieces {
		if p.ProviderID == currentUser(c).ID {
			mine = append(mine, p)
		}
	}
	if len(mine) == 0 {
		return market.Reservation{}, nil, market.Errorf(market.CodeNotFound, "That reservation could not be found.")
	}
	return r, mine, nil
}

func (h *Handler) handleProviderIncidentForm(c echo.Context) error {
	r, mine, err := h.providerReservation(c)
	if err != nil {
		return err
	}
	back := fmt.Sprintf("/provider/bookings/%d", r.ID)
	v := incidentFormView(r, mine, back+"/incidents", back, true, incidentInput{}, nil)
	return render(c, http.StatusOK, views.IncidentForm(h.page(c, v.Title), v))
}

func (h *Handler) handleProviderIncident(c echo.Context) error {
	r, mine, err := h.providerReservation(c)
	if err != nil {
		return err
	}
	back := fmt.Sprintf("/provider/bookings/%d", r.ID)
	return h.reportIncident(c, r, mine, store.ReportedByProvider, back+"/incidents", back)
}

func (h *Handler) handleIncidentAcknowledge(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	inc, err := h.wf.AcknowledgeIncident(c.Request().Context(), currentUser(c).ID, id)
	if err != nil {
		return err
	}
	h.setFlash(c, "ok", "Acknowledged; the incident counts in settlement.")
	return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/provider/bookings/%d", inc.ReservationID))
}

// handleProviderBooking is a provider's page of one reservation on their offers.
func (h *Handler) handleProviderBooking(c echo.Context) error {
	r, mine, err := h.providerReservation(c)
	if err != nil {
		return err
	}
	v, err := h.providerBookingView(c, r, mine)
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.ProviderBooking(h.page(c, fmt.Sprintf("Booking %d", r.ID)), v))
}

// handleIncidentNote adds the provider's note to an incident its agent
// measured on this booking (store.AnnotateIncident checks whose it is); a
// bad note re-renders the booking page with 422, the note kept and the
// message next to it.
func (h *Handler) handleIncidentNote(c echo.Context) error {
	r, mine, err := h.providerReservation(c)
	if err != nil {
		return err
	}
	incID, err := strconv.ParseInt(c.Param("incident"), 10, 64)
	if err != nil {
		return market.Errorf(market.CodeNotFound, "That incident could not be found.")
	}
	body := c.FormValue("note")
	_, err = h.wf.AnnotateIncident(c.Request().Context(), currentUser(c).ID, incID, body)
	if market.ErrorCode(err) == market.CodeInvalid {
		v, verr := h.providerBookingView(c, r, mine)
		if verr != nil {
			return verr
		}
		for i := range v.Incidents {
			if v.Incidents[i].ID == strconv.FormatInt(incID, 10) {
				v.Incidents[i].NoteValue, v.Incidents[i].NoteError = body, market.FieldErrors(err)["note"]
			}
		}
		return render(c, http.StatusUnprocessableEntity, views.ProviderBooking(h.page(c, fmt.Sprintf("Booking %d", r.ID)), v))
	}
	if err != nil {
		return err
	}
	logger(c).Info("incident annotated", "incident_id", incID, "reservation_id", r.ID)
	h.setFlash(c, "ok", "Note added; the buyer and the admins see it beside the measurement.")
	return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/provider/bookings/%d#incident-%d", r.ID, incID))
}

// providerBookingView is a provider's view of one reservation on their offers.
func (h *Handler) providerBookingView(c echo.Context, r market.Reservation, mine []market.ReservationPiece) (views.ProviderBookingView, error) {
	ctx := c.Request().Context()
	base := fmt.Sprintf("/provider/bookings/%d", r.ID)
	buyer, err := h.db.FindUserByID(ctx, r.BuyerID)
	if err != nil {
		return views.ProviderBookingView{}, err
	}
	v := views.ProviderBookingView{ReservationID: strconv.FormatInt(r.ID, 10), State: string(r.State), StateLabel: r.StateLabel(), Buyer: buyer.DisplayName}
	if v.Resale, v.ResaleID, err = h.bookingResaleMark(ctx, r); err != nil {
		return v, err
	}
	if v.ResaleID != "" {
		v.ResaleURL = "/provider/bookings/" + v.ResaleID
	}
	cache := map[int64]pieceInfo{}
	for _, p := range mine {
		info, err := h.pieceInfo(ctx, p.OfferID, cache)
		if err != nil {
			return v, err
		}
		row := views.ReservationPieceRow{OfferTitle: info.title, Devices: strconv.Itoa(p.Devices),
			Window: formatTime(p.Start) + " – " + formatTime(p.End), Amount: p.AmountCents.String()}
		if r.ResaleOf != 0 { // bought on resale: its pieces carry no money (0), as on the Bookings list
			row.Amount = fmt.Sprintf("paid in #%d", r.ResaleOf)
		}
		v.Pieces = append(v.Pieces, row)
	}
	incs, err := h.db.ListIncidents(ctx, r.ID)
	if err != nil {
		return v, err
	}
	notes, err := h.db.ListIncidentNotes(ctx, r.ID)
	if err != nil {
		return v, err
	}
	settling := h.settlementNote(ctx, r.ID, currentUser(c).ID, &v.Note)
	if note := awaitingNote(r, incs, currentUser(c).ID); !settling && note != "" {
		v.Note = note
	}
	v.Incidents = incidentRows(incs, notes, mine, true, settling)
	for i := range v.Incidents {
		if v.Incidents[i].Measured {
			v.Incidents[i].NoteURL = fmt.Sprintf("%s/incidents/%s/notes", base, v.Incidents[i].ID)
		}
	}
	if !settling && (r.State == market.ReservationActive || r.State == market.ReservationCompleted) {
		v.ReportURL = base + "/incidents/new"
	}
	if settling {
		v.StatementURL = base + "/statement"
	}
	t, err := h.db.ReservationThread(ctx, currentUser(c).ID, r.ID)
	if err != nil {
		return v, err
	}
	v.Thread = threadView(t, currentUser(c).ID, backBooking)
	return v, nil
}

// incidentRows lists incidents on the given pieces; for the provider a
// buyer's report still open gets an acknowledge button.
func incidentRows(incs []store.Incident, notes map[int64][]store.IncidentNote, pieces []market.ReservationPiece, provider, settling bool) []views.IncidentRow {
	on := map[int64]bool{}
	for _, p := range pieces {
		on[p.ID] = true
	}
	var rows []views.IncidentRow
	for _, i := range incs {
		if !on[i.PieceID] {
			continue
		}
		// The reader's own reports are "you", the other party's by role;
		// the agent's are measured, nobody's own.
		by := "the " + i.ReportedBy
		switch {
		case i.ReportedBy == store.ReportedByAgent:
			by = "the provider's agent (measured)"
		case (i.ReportedBy == store.ReportedByProvider) == provider:
			by = "you"
		}
		row := views.IncidentRow{ID: strconv.FormatInt(i.ID, 10), Kind: i.Kind.Label(), Note: i.Note,
			Window: formatSpan(i.Start, i.End), Devices: strconv.Itoa(i.DevicesAffected), ReportedBy: by,
			Measured: i.ReportedBy == store.ReportedByAgent}
		for _, n := range notes[i.ID] {
			row.Notes = append(row.Notes, views.IncidentNoteRow{At: formatTime(n.CreatedAt), Body: n.Body})
		}
		switch {
		case i.Acknowledged:
			row.Status = "Applies"
		case !i.DisputedAt.IsZero():
			row.Status = "Not acknowledged in time: a dispute for the admins"
		default:
			row.Status = "Awaiting the provider's acknowledgement until " + formatTime(i.CreatedAt.Add(workflow.IncidentAckDeadline))
			if provider && !settling {
				row.AckURL = fmt.Sprintf("/provider/incidents/%d/acknowledge", i.ID)
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// reservationBilling builds the payment, incident and settlement panel of
// a buyer's reservation page.
func (h *Handler) reservationBilling(ctx context.Context, r market.Reservation) (views.ReservationBilling, error) {
	base := fmt.Sprintf("/reservations/%d", r.ID)
	v := views.ReservationBilling{Simulated: h.simulated()}
	now := h.now()
	p, err := h.db.FindPayment(ctx, r.ID)
	switch {
	case err == nil:
		v.PaymentStatus = paymentStatusText(p)
		if p.Status == store.PaymentFailed {
			v.PaymentFailure = "The last payment attempt failed: " + p.FailureMessage
		}
	case market.ErrorCode(err) != market.CodeNotFound:
		return v, err
	default:
		v.PaymentStatus = "Not paid."
	}
	if r.State == market.ReservationHeld && now.Before(r.HoldExpiresAt) && (err != nil || p.Status == store.PaymentOpen || p.Status == store.PaymentFailed) {
		v.PayURL = base + "/pay"
		m, err := h.db.DefaultPaymentMethod(ctx, r.BuyerID)
		switch {
		case err == nil:
			v.PaySavedURL, v.SavedLabel = base+"/pay-saved", m.Label
		case market.ErrorCode(err) != market.CodeNotFound:
			return v, err
		}
	}
	incs, err := h.db.ListIncidents(ctx, r.ID)
	if err != nil {
		return v, err
	}
	notes, err := h.db.ListIncidentNotes(ctx, r.ID)
	if err != nil {
		return v, err
	}
	settling := h.settlementNote(ctx, r.ID, 0, &v.SettlementNote)
	if note := awaitingNote(r, incs, 0); !settling && note != "" {
		v.SettlementNote = note
	}
	v.Incidents = incidentRows(incs, notes, r.Pieces, false, settling)
	// Hours sold on resale are reported on the resale buyer's reservation.
	if !settling && (r.State == market.ReservationActive || r.State == market.ReservationCompleted) && len(market.HeldPieces(r)) > 0 {
		v.ReportURL = base + "/incidents/new"
	}
	if settling {
		v.StatementURL = base + "/statement"
	}
	ds, err := h.db.ListReservationDisputes(ctx, r.ID)
	if err != nil {
		return v, err
	}
	for _, d := range ds {
		v.Disputes = append(v.Disputes, fmt.Sprintf("Dispute %d (%s): %s", d.ID, d.Status, d.Statement))
	}
	return v, nil
}

func paymentStatusText(p store.Payment) string {
	switch p.Status {
	case store.PaymentOpen:
		return "Payment started, not completed."
	case store.PaymentPaid:
		return fmt.Sprintf("Paid %s.", p.Amount)
	case store.PaymentFailed:
		return "Payment failed."
	case store.PaymentRefundPending:
		return fmt.Sprintf("Paid %s after the hold had ended: the full amount is being refunded.", p.Amount)
	case store.PaymentRefunded:
		return fmt.Sprintf("Paid %s after the hold had ended: refunded in full.", p.Amount)
	}
	return string(p.Status)
}

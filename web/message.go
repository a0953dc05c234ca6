package web

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
)

// How buyers get in when an offer's hosts run no agent (issue 31): the
// access mode on cards, offer pages and quotes, the provider's
// instructions after payment, and a reservation's messages between its
// buyer and its providers (store.ReservationThread decides who reads).

// accessModeView is an offer's access mode for the views.
func accessModeView(m market.AccessMode) views.AccessModeView {
	return views.AccessModeView{Agent: m.Agent(), Label: m.Label(), Text: m.Text()}
}

// Where the message form returns after posting.
const (
	backReservation = "reservation"
	backBooking     = "booking"
)

// threadView builds a thread for its reader; back is where the form
// returns ("" for the thread's own page).
func threadView(t store.MessageThread, readerID int64, back string) views.MessageThreadView {
	r := t.Reservation
	v := views.MessageThreadView{Show: true, PageURL: store.MessagesPath(r.ID), Back: back}
	switch t.Role {
	case market.MessageBuyer:
		v.Heading = "Messages with the provider"
		v.Intro = "Ask the provider anything about this reservation; they are notified and mailed."
	case market.MessageProvider:
		v.Heading = "Messages with the buyer"
		v.Intro = "Answer the buyer here; they are notified and mailed."
	default:
		v.Heading = "Messages between the buyer and the providers"
		v.Intro = "Read only: admins see the thread as evidence; they do not write in it."
	}
	if t.Role != "" {
		v.PostURL = store.MessagesPath(r.ID)
	}
	if back == "" {
		v.PageURL = ""
	}
	for _, m := range t.Messages {
		v.Messages = append(v.Messages, views.MessageRow{ID: strconv.FormatInt(m.ID, 10), Author: m.AuthorName, Role: string(m.AuthorRole),
			At: formatTime(m.CreatedAt), Body: m.Body, Mine: m.AuthorID == readerID})
	}
	return v
}

// reservationContact builds the buyer's contact with the providers: the
// access instructions of pieces on offers without the agent once the
// reservation is paid, and the thread.
func (h *Handler) reservationContact(ctx context.Context, buyerID int64, r market.Reservation, back string) (views.ReservationContactView, error) {
	t, err := h.db.ReservationThread(ctx, buyerID, r.ID)
	if err != nil {
		return views.ReservationContactView{}, err
	}
	v := views.ReservationContactView{Thread: threadView(t, buyerID, back)}
	if t.Role != market.MessageBuyer {
		return v, nil
	}
	cache, seen := map[int64]pieceInfo{}, map[int64]bool{}
	manual := false
	for _, p := range r.Pieces {
		info, err := h.pieceInfo(ctx, p.OfferID, cache)
		if err != nil {
			return v, err
		}
		if info.offer.Access.Agent() || seen[p.OfferID] {
			continue
		}
		seen[p.OfferID], manual = true, true
		if paidState(r.State) {
			v.Instructions = append(v.Instructions, views.AccessInstruction{OfferTitle: info.title, Provider: info.provider, Text: info.offer.AccessInstructions})
		}
	}
	if manual && !paidState(r.State) {
		v.Pending = "The provider's access instructions appear here once the reservation is paid."
	}
	return v, nil
}

// handleMessages is a reservation's messages on their own page, for its
// buyer or one of its providers; anyone else is told it is not found.
func (h *Handler) handleMessages(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	return h.renderMessages(c, id, http.StatusOK, "", "", "")
}

// renderMessages renders the thread's page for the signed-in party, with
// a message being written, its error, and where the form returns.
func (h *Handler) renderMessages(c echo.Context, id int64, status int, body, bodyErr, back string) error {
	ctx := c.Request().Context()
	u := currentUser(c)
	t, err := h.db.ReservationThread(ctx, u.ID, id)
	if err != nil {
		return err
	}
	v := views.MessagesPageView{Heading: fmt.Sprintf("Messages of reservation #%d", id)}
	if t.Role == market.MessageBuyer {
		v.BackURL, v.BackText = fmt.Sprintf("/reservations/%d", id), "Back to the reservation"
		if v.Contact, err = h.reservationContact(ctx, u.ID, t.Reservation, ""); err != nil {
			return err
		}
	} else {
		v.Heading = fmt.Sprintf("Messages of booking #%d", id)
		v.BackURL, v.BackText = fmt.Sprintf("/provider/bookings/%d", id), "Back to the booking"
		v.Contact.Thread = threadView(t, u.ID, "")
	}
	v.Contact.Thread.Body, v.Contact.Thread.Error = body, bodyErr
	if back == backReservation || back == backBooking {
		v.Contact.Thread.Back = back
	}
	return render(c, status, views.MessagesPage(h.page(c, v.Heading), v))
}

// handleMessagePost adds the signed-in party's message (workflow.PostMessage;
// the store checks who is a party). An empty or oversized message
// re-renders the thread's page with 422, the text kept and the error next
// to it; a sent one returns to where it was written.
func (h *Handler) handleMessagePost(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	body := c.FormValue("body")
	m, err := h.wf.PostMessage(c.Request().Context(), currentUser(c).ID, id, body)
	if market.ErrorCode(err) == market.CodeInvalid {
		return h.renderMessages(c, id, http.StatusUnprocessableEntity, body, market.FieldErrors(err)["body"], c.FormValue("back"))
	}
	if err != nil {
		return err
	}
	h.setFlash(c, "ok", "Message sent; the other side is notified.")
	to := store.MessagesPath(id)
	switch c.FormValue("back") {
	case backReservation:
		to = fmt.Sprintf("/reservations/%d", id)
	case backBooking:
		to = fmt.Sprintf("/provider/bookings/%d", id)
	}
	return c.Redirect(http.StatusSeeOther, fmt.Sprintf("%s#message-%d", to, m.ID))
}

// handleAdminMessages is any reservation's messages, read only, for an
// admin (a dispute's evidence).
func (h *Handler) handleAdminMessages(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	t, err := h.db.AdminReservationThread(c.Request().Context(), id)
	if err != nil {
		return err
	}
	v := views.MessagesPageView{Heading: fmt.Sprintf("Messages of reservation #%d", id),
		BackURL: fmt.Sprintf("/admin/reservations/%d", id), BackText: "Back to the reservation"}
	v.Contact.Thread = threadView(t, currentUser(c).ID, "")
	return render(c, http.StatusOK, views.MessagesPage(h.page(c, v.Heading), v))
}

// apiMessage is one message of a reservation's thread in the API.
type apiMessage struct {
	ID        int64     `json:"id"`
	AuthorID  int64     `json:"author_id"`
	Author    string    `json:"author"`
	Role      string    `json:"role"`
	Body      string    `json:"body"`
	CreatedAt time.Time `json:"created_at"`
}

// apiThread is a reservation's thread in the API, with the reader's part
// in it.
type apiThread struct {
	ReservationID int64        `json:"reservation_id"`
	Role          string       `json:"role"`
	Messages      []apiMessage `json:"messages"`
}

// apiMessageBody is what the API posts.
type apiMessageBody struct {
	Body string `json:"body"`
}

func toAPIMessage(m store.ReservationMessage) apiMessage {
	return apiMessage{ID: m.ID, AuthorID: m.AuthorID, Author: m.AuthorName, Role: string(m.AuthorRole), Body: m.Body, CreatedAt: m.CreatedAt}
}

// handleAPIMessages is a reservation's messages for its buyer or one of
// its providers (anyone else: 404).
func (h *Handler) handleAPIMessages(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	t, err := h.db.ReservationThread(c.Request().Context(), currentUser(c).ID, id)
	if err != nil {
		return err
	}
	out := apiThread{ReservationID: t.Reservation.ID, Role: string(t.Role), Messages: []apiMessage{}}
	for _, m := range t.Messages {
		out.Messages = append(out.Messages, toAPIMessage(m))
	}
	return writeJSON(c, http.StatusOK, out)
}

// handleAPIMessagePost adds a message of the reservation's buyer or one
// of its providers (workflow.PostMessage).
func (h *Handler) handleAPIMessagePost(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	var body apiMessageBody
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	m, err := h.wf.PostMessage(c.Request().Context(), currentUser(c).ID, id, body.Body)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusCreated, toAPIMessage(m))
}

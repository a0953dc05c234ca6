package web

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
	"github.com/gpumarket/gpumarket/workflow"
)

// mailListLimit is how many messages the outbox and mailbox pages show.
const mailListLimit = 200

// mailKindLabels names each mailed notification kind on the preferences
// form, and securityMailLabels the security mail that is always sent.
var mailKindLabels = map[string]string{
	store.NotifyBookingHeld:          "A reservation is held and waits for payment",
	store.NotifyBookingConfirmed:     "A reservation is paid and confirmed",
	store.NotifyBookingExpired:       "A reservation's hold ended unpaid",
	store.NotifyPaymentFailed:        "A payment did not go through",
	store.NotifyReservationStarting:  "A reservation starts (with how to connect)",
	store.NotifyBookingMade:          "A new booking on my offers",
	store.NotifyBookingCancelled:     "A booking is cancelled",
	store.NotifyStatementReady:       "A statement is ready (refund and payout amounts)",
	store.NotifyRefundSent:           "A refund is sent",
	store.NotifyPayoutSent:           "A payout is sent",
	store.NotifyPayoutHeld:           "A payout is held",
	store.NotifyIncidentReported:     "An incident is reported",
	store.NotifyIncidentAcknowledged: "An incident I reported is acknowledged",
	store.NotifyReservationMessage:   "A message on one of my reservations or bookings",
	store.NotifyDisputeOpened:        "A dispute is opened",
	store.NotifyDisputeAnswered:      "A dispute is answered",
	store.NotifyDisputeDecided:       "A dispute is decided",
	store.NotifyListingApproved:      "An offer is approved",
	store.NotifyListingRejected:      "An offer is rejected",
	store.NotifyListingChanges:       "Changes are requested on an offer",
	store.NotifyAccountSuspended:     "My account is suspended",
	store.NotifyAccountReinstated:    "My account is reinstated",
	store.NotifyOrderFilled:          "A standing order of mine fills",
	store.NotifyOrderNote:            "A filled standing order needs me (a declined payment)",
	store.NotifyOrderExpired:         "A standing order of mine expires unfilled",
	store.NotifyOrderCancelled:       "I cancel a standing order",
	store.NotifyRentalReplaced:       "A rental of mine is moved after a host failure (with how to connect)",
	store.NotifyReplacementOffered:   "A host failed and a replacement waits for my confirmation",
	store.NotifyReplacementUnfilled:  "A host failed and no replacement was booked",
	store.NotifyMeteredRental:        "My metered rental runs low on balance or stops",
}

var securityMailLabels = []string{"address verification", "password reset", "address change", "sign-up with your address", "sign-in method changes"}

// mailRow formats an outbox message for a list; url is its page.
func (h *Handler) mailRow(m store.OutboxMail, url string) views.MailRow {
	r := views.MailRow{ID: strconv.FormatInt(m.ID, 10), URL: url, To: m.To, Kind: m.Kind, Security: store.SecurityMail(m.Kind),
		Subject: m.Subject, Created: formatTime(m.CreatedAt), Attempts: strconv.Itoa(m.Attempts), LastError: m.LastError}
	switch {
	case m.Sent():
		r.State, r.StateText = "sent", "sent "+formatTime(m.SentAt)
	case m.Failed():
		r.State, r.StateText = "failed", fmt.Sprintf("given up %s after %d attempt(s)", formatTime(m.FailedAt), m.Attempts)
	case !h.wf.SendsMail():
		r.State, r.StateText = "waiting", "not sent: no SMTP server configured"
	case m.Attempts > 0:
		r.State, r.StateText = "waiting", fmt.Sprintf("attempt %d failed; next try %s", m.Attempts, formatTime(m.NextAttemptAt))
	default:
		r.State, r.StateText = "waiting", "queued; goes out at the next background tick"
	}
	return r
}

func (h *Handler) handleAdminMail(c echo.Context) error {
	ctx := c.Request().Context()
	ms, err := h.db.ListMail(ctx, 0, mailListLimit)
	if err != nil {
		return err
	}
	counts, err := h.db.CountMail(ctx)
	if err != nil {
		return err
	}
	v := views.MailListView{Admin: true, Sends: h.wf.SendsMail(), Sent: strconv.Itoa(counts.Sent),
		Waiting: strconv.Itoa(counts.Waiting), Failed: strconv.Itoa(counts.Failed)}
	for _, m := range ms {
		v.Rows = append(v.Rows, h.mailRow(m, fmt.Sprintf("/admin/mail/%d", m.ID)))
	}
	return render(c, http.StatusOK, views.MailList(h.page(c, "Outbox"), v))
}

func (h *Handler) handleAdminMailShow(c echo.Context) error {
	m, err := h.findMail(c)
	if err != nil {
		return err
	}
	v := h.mailMessage(m, "/admin/mail", currentUser(c))
	v.Admin = true
	if m.Failed() {
		v.RetryAction = fmt.Sprintf("/admin/mail/%d/retry", m.ID)
	}
	return render(c, http.StatusOK, views.MailMessage(h.page(c, m.Subject), v))
}

func (h *Handler) handleAdminMailRetry(c echo.Context) error {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil {
		return market.Errorf(market.CodeNotFound, "No such message.")
	}
	if err := h.wf.RetryMail(c.Request().Context(), id); err != nil {
		if market.ErrorCode(err) != market.CodeConflict {
			return err
		}
		h.setFlash(c, "error", market.ErrorMessage(err))
	} else {
		h.setFlash(c, "ok", "The message is queued again; it goes out at the next background tick.")
	}
	return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/admin/mail/%d", id))
}

// handleMailbox is the demo mailbox: in demo mode, the mail addressed to
// the signed-in person (everyone's for an admin). Elsewhere it is not found.
func (h *Handler) handleMailbox(c echo.Context) error {
	if !h.cfg.Demo {
		return market.Errorf(market.CodeNotFound, "There is no demo mailbox on this server.")
	}
	u := currentUser(c)
	var owner int64
	if !u.IsAdmin {
		owner = u.ID
	}
	ms, err := h.db.ListMail(c.Request().Context(), owner, mailListLimit)
	if err != nil {
		return err
	}
	v := views.MailListView{Sends: h.wf.SendsMail(), AllMail: u.IsAdmin}
	for _, m := range ms {
		v.Rows = append(v.Rows, h.mailRow(m, fmt.Sprintf("/mailbox/%d", m.ID)))
	}
	return render(c, http.StatusOK, views.MailList(h.page(c, "Demo mailbox"), v))
}

func (h *Handler) handleMailboxShow(c echo.Context) error {
	if !h.cfg.Demo {
		return market.Errorf(market.CodeNotFound, "There is no demo mailbox on this server.")
	}
	m, err := h.findMail(c)
	if err != nil {
		return err
	}
	if u := currentUser(c); !u.IsAdmin && m.UserID != u.ID {
		return market.Errorf(market.CodeNotFound, "No such message.")
	}
	v := h.mailMessage(m, "/mailbox", currentUser(c))
	v.Demo = true
	return render(c, http.StatusOK, views.MailMessage(h.page(c, m.Subject), v))
}

// mailAddressee reports whether reader is the addressee of m: the account
// it is for, whose address is the one it was sent to. A mail to another
// address (a new address not yet confirmed) is nobody's on this server:
// the demo mailbox must not let an account confirm an address it does not
// own.
func mailAddressee(m store.OutboxMail, reader *market.User) bool {
	return reader != nil && m.UserID == reader.ID && m.To == reader.Email
}

func (h *Handler) findMail(c echo.Context) (store.OutboxMail, error) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil {
		return store.OutboxMail{}, market.Errorf(market.CodeNotFound, "No such message.")
	}
	return h.db.FindMail(c.Request().Context(), id)
}

// redactedLink stands where a secret link was (store.SecretLinkMail).
const redactedLink = "[link sent to the addressee]"

// mailMessage shows m as the sender makes it (workflow.MailMessage). A
// secret link (store.SecretLinkMail) is shown only to its addressee (the
// account the mail is for, at the address it was sent to); anyone else
// (an admin, another account) sees redactedLink in its place.
func (h *Handler) mailMessage(m store.OutboxMail, back string, reader *market.User) views.MailMessageView {
	compose, msg := h.wf.MailComposer(), workflow.MailMessage(m)
	if store.SecretLinkMail(m.Kind) && !mailAddressee(m, reader) {
		msg.Path = ""
		msg.Body = strings.TrimSpace(msg.Body) + "\n\n" + redactedLink
	}
	v := views.MailMessageView{Row: h.mailRow(m, ""), From: h.wf.MailFrom(), MessageID: compose.MessageID(m.ID),
		Link: compose.Link(msg), Text: compose.Text(msg), BackURL: back}
	if msg.Notification {
		v.Unsubscribe = compose.PreferencesURL()
	}
	return v
}

// mailPrefs is the preferences form for user id, with its current choices.
func (h *Handler) mailPrefs(c echo.Context, userID int64, ret string) (views.MailPrefsView, error) {
	off, err := h.db.MailOptOuts(c.Request().Context(), userID)
	if err != nil {
		return views.MailPrefsView{}, err
	}
	v := views.MailPrefsView{Security: securityMailLabels, Return: ret}
	for _, k := range store.MailedNotificationKinds() {
		label := mailKindLabels[k]
		if label == "" {
			label = store.MailSubject(k)
		}
		v.Kinds = append(v.Kinds, views.MailPrefKind{Name: k, Label: label, On: !off[k]})
	}
	return v, nil
}

func (h *Handler) handleMailPrefs(c echo.Context) error {
	v, err := h.mailPrefs(c, currentUser(c).ID, "")
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.MailPreferencesPage(h.page(c, "E-mail preferences"), v))
}

// handleMailPrefsSave saves the checkboxes: a kind unticked is turned off.
func (h *Handler) handleMailPrefsSave(c echo.Context) error {
	off := map[string]bool{}
	for _, k := range store.MailedNotificationKinds() {
		if c.FormValue("mail_"+k) == "" {
			off[k] = true
		}
	}
	if err := h.wf.SetMailOptOuts(c.Request().Context(), currentUser(c).ID, off); err != nil {
		return err
	}
	h.setFlash(c, "ok", "E-mail preferences saved.")
	if c.FormValue("return") == "account" {
		return c.Redirect(http.StatusSeeOther, "/account#mail-preferences")
	}
	return c.Redirect(http.StatusSeeOther, "/account/mail")
}

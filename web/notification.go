package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
)

func (h *Handler) handleNotifications(c echo.Context) error {
	ns, err := h.db.ListNotifications(c.Request().Context(), currentUser(c).ID, 100)
	if err != nil {
		return err
	}
	v := views.NotificationsView{}
	for i, n := range ns {
		unread := n.ReadAt.IsZero()
		v.HasUnread = v.HasUnread || unread
		// The store keeps what a notification says; its words are
		// written here, as its e-mail's are in workflow.MailMessage.
		row := views.NotificationRow{Kind: n.Kind, Message: n.Notice.Text(), URL: n.URL, At: formatTime(n.CreatedAt), Unread: unread}
		// Notifications of one kind about one thing (the same page), one
		// after another, are one row: the newest, with the earlier below.
		if last := len(v.Rows) - 1; i > 0 && sameThread(ns[i-1], n) {
			v.Rows[last].Earlier = append(v.Rows[last].Earlier, row)
			v.Rows[last].Unread = v.Rows[last].Unread || unread
			continue
		}
		v.Rows = append(v.Rows, row)
	}
	return render(c, http.StatusOK, views.Notifications(h.page(c, "Notifications"), v))
}

// sameThread reports whether b, listed just after a, is of a's kind about
// the same thing (a reservation, an order: the page it links to), so the
// page shows them as one row. A notification that links nowhere or says
// its own words stands alone.
func sameThread(a, b store.Notification) bool {
	return a.URL != "" && a.URL == b.URL && a.Notice.Kind != market.NoticeText && a.Notice.Kind == b.Notice.Kind
}

func (h *Handler) handleNotificationsRead(c echo.Context) error {
	if err := h.wf.MarkNotificationsRead(c.Request().Context(), currentUser(c).ID); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/notifications")
}

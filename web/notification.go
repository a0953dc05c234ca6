package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/views"
)

func (h *Handler) handleNotifications(c echo.Context) error {
	ns, err := h.db.ListNotifications(c.Request().Context(), currentUser(c).ID, 100)
	if err != nil {
		return err
	}
	v := views.NotificationsView{}
	for _, n := range ns {
		unread := n.ReadAt.IsZero()
		v.HasUnread = v.HasUnread || unread
		// The store keeps what a notification says; its words are
		// written here, as its e-mail's are in workflow.MailMessage.
		v.Rows = append(v.Rows, views.NotificationRow{Kind: n.Kind, Message: n.Notice.Text(), URL: n.URL, At: formatTime(n.CreatedAt), Unread: unread})
	}
	return render(c, http.StatusOK, views.Notifications(h.page(c, "Notifications"), v))
}

func (h *Handler) handleNotificationsRead(c echo.Context) error {
	if err := h.wf.MarkNotificationsRead(c.Request().Context(), currentUser(c).ID); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/notifications")
}

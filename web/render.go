package web

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
)

// render renders a component into a buffer first, so a failed render still
// becomes a clean error page instead of half a page.
func render(c echo.Context, status int, comp templ.Component) error {
	var buf bytes.Buffer
	if err := comp.Render(c.Request().Context(), &buf); err != nil {
		return err
	}
	return c.HTMLBlob(status, buf.Bytes())
}

// page builds the layout model for a request: the user, the CSRF token and
// any pending flash.
func (h *Handler) page(c echo.Context, title string) views.Page {
	p := views.Page{Title: title, Path: c.Request().URL.Path, Demo: h.cfg.Demo, Simulated: h.simulated(), CSRF: h.csrfToken(c)}
	if u := currentUser(c); u != nil {
		p.User = &views.NavUser{Name: u.DisplayName, IsBuyer: u.IsBuyer, IsProvider: u.IsProvider, IsAdmin: u.IsAdmin, Unverified: !u.Verified()}
		// One indexed COUNT per page view; a failure only hides the badge.
		if n, err := h.db.CountUnreadNotifications(c.Request().Context(), u.ID); err == nil {
			p.User.Unread = n
		}
	}
	p.FlashKind, p.Flash = h.takeFlash(c)
	return p
}

// statusOf maps an error code to its HTTP status.
func statusOf(code market.Code) int {
	switch code {
	case market.CodeInvalid:
		return http.StatusUnprocessableEntity
	case market.CodeNotFound:
		return http.StatusNotFound
	case market.CodeConflict:
		return http.StatusConflict
	case market.CodeUnauthorized:
		return http.StatusUnauthorized
	case market.CodeForbidden:
		return http.StatusForbidden
	case market.CodeRateLimited:
		return http.StatusTooManyRequests
	case market.CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// handleError is Echo's one error handler: it maps market codes and Echo's
// own errors to a status, logs internal errors with the request id, and
// renders an error page or, under /api/ and /agent/, a JSON error. A person
// never sees the text of an internal error.
func (h *Handler) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	if ctx := c.Request().Context(); ctx.Err() != nil {
		// The request's deadline has passed (or it was given up): the
		// error page gets a moment of its own to render, and the little it
		// reads (the unread-mail badge) is bounded by it.
		fresh, cancel := context.WithTimeout(context.WithoutCancel(ctx), errorPageTimeout)
		defer cancel()
		c.SetRequest(c.Request().WithContext(fresh))
	}
	status := http.StatusInternalServerError
	code := market.CodeInternal
	msg := market.ErrorMessage(err)
	var he *echo.HTTPError
	if errors.As(err, &he) {
		status = he.Code
		switch status {
		case http.StatusNotFound:
			code, msg = market.CodeNotFound, "There is nothing at this address."
		case http.StatusMethodNotAllowed:
			code, msg = market.CodeInvalid, "This address does not accept that kind of request."
		case http.StatusRequestEntityTooLarge:
			code, msg = market.CodeInvalid, "That request is too large."
		case http.StatusBadRequest:
			code, msg = market.CodeInvalid, "The request could not be understood."
			if me := (*market.Error)(nil); errors.As(he.Internal, &me) {
				msg = me.Message // text refused at the boundary (unstorableText) names its field
			}
		case http.StatusForbidden:
			code, msg = market.CodeForbidden, "You may not do that."
		case http.StatusTooManyRequests:
			code, msg = market.CodeRateLimited, "Too many requests; slow down and try again shortly."
		default:
			if status < 500 {
				code, msg = market.CodeInvalid, http.StatusText(status)
			}
		}
	} else if store.IsUnavailable(err) {
		// The database is down, out of connections, locked or did not
		// answer within the request's deadline: a moment's outage, not a
		// bug. Nothing commits after the deadline, but an earlier step of
		// the request may have, hence the advice to look first.
		code, msg = market.CodeUnavailable, msgUnavailable
		status = statusOf(code)
	} else {
		code = market.ErrorCode(err)
		status = statusOf(code)
	}
	switch hd := c.Response().Header(); {
	case status == http.StatusTooManyRequests && hd.Get("Retry-After") == "":
		hd.Set("Retry-After", "1")
	case status == http.StatusServiceUnavailable && hd.Get("Retry-After") == "":
		hd.Set("Retry-After", strconv.Itoa(unavailableRetrySeconds))
	}
	reqID := c.Response().Header().Get(echo.HeaderXRequestID)
	switch {
	case code == market.CodeUnavailable:
		logger(c).Error("database unavailable", "err", err, "path", c.Request().URL.Path)
	case status >= 500:
		logger(c).Error("internal error", "err", err, "path", c.Request().URL.Path)
	}

	if path := c.Request().URL.Path; strings.HasPrefix(path, "/api/") || strings.HasPrefix(path, "/agent/") {
		if code == market.CodeInvalid {
			status = http.StatusBadRequest // API clients send malformed JSON, not forms
		}
		_ = c.JSON(status, apiErrorBody{Error: apiError{Code: code, Message: msg, Fields: market.FieldErrors(err), RequestID: reqID}})
		return
	}
	heading := map[int]string{
		http.StatusNotFound:            "Not found",
		http.StatusForbidden:           "Not allowed",
		http.StatusConflict:            "That changed in the meantime",
		http.StatusTooManyRequests:     "Slow down",
		http.StatusUnprocessableEntity: "Please check your input",
		http.StatusServiceUnavailable:  "Temporarily unavailable",
	}[status]
	if heading == "" {
		heading = "Something went wrong"
		if status < 500 {
			heading = "That did not work"
		}
	}
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(status)
		return
	}
	p := h.page(c, heading)
	if err := render(c, status, views.ErrorPage(p, views.ErrorView{Status: status, Heading: heading, Message: msg, ID: reqID})); err != nil {
		logger(c).Error("error page failed", "err", err)
		_ = c.String(status, msg)
	}
}

// msgUnavailable is what a person reads when the database is out of reach;
// unavailableRetrySeconds is the Retry-After sent with it.
const (
	msgUnavailable          = "The marketplace cannot reach its database just now. Please try again in a few seconds; if you were booking or paying, look at your reservations first to see whether it went through."
	unavailableRetrySeconds = 5
	// errorPageTimeout bounds an error page rendered after its request's
	// deadline.
	errorPageTimeout = time.Second
)

// apiErrorBody is the JSON shape of every API error.
type apiErrorBody struct {
	Error apiError `json:"error"`
}

type apiError struct {
	Code      market.Code       `json:"code"`
	Message   string            `json:"message"`
	Fields    map[string]string `json:"fields,omitempty"`
	RequestID string            `json:"request_id,omitempty"`
}

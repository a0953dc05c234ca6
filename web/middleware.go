package web

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/agentapi"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// Context keys for values the middleware puts on a request.
const (
	ctxLogger  = "logger"
	ctxUser    = "user"
	ctxSession = "session"
)

// requestLogger gives every request a logger carrying its request id, and
// logs one line per request when it is done, and measures it by route.
func (h *Handler) requestLogger(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		id := c.Response().Header().Get(echo.HeaderXRequestID)
		l := h.log.With("request_id", id)
		c.Set(ctxLogger, l)
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		req := c.Request()
		took := time.Since(start)
		route := c.Path()
		// An agent's heartbeat or long-poll answered 2xx is routine (a
		// fleet sends a thousand a second): heard at DEBUG, and not even
		// formatted when that is off.
		level := slog.LevelInfo
		if routineRoutes[route] && c.Response().Status < 300 {
			level = slog.LevelDebug
		}
		if l.Enabled(req.Context(), level) {
			l.Log(req.Context(), level, "request",
				"method", req.Method,
				"path", req.URL.Path,
				"status", c.Response().Status,
				"bytes", c.Response().Size,
				"duration_ms", float64(took.Microseconds())/1000,
				"remote", c.RealIP(),
			)
		}
		if !h.routeSet[req.Method+" "+route] {
			route = "unmatched"
		}
		h.cfg.Metrics.ObserveRequest(req.Method, route, c.Response().Status, took)
		return nil
	}
}

// routineRoutes are the routes requestLogger logs at DEBUG when they
// succeed: the agents' periodic requests.
var routineRoutes = map[string]bool{"/" + agentapi.PathHeartbeat: true, "/" + agentapi.PathAssignments: true}

// deadline gives every request a deadline timeout after it began
// (Config.RequestTimeout): what the request asks of the database under
// its context gives up then, and its write transaction rolls back unless
// it has committed — so no request commits after its deadline — and the
// central error handler answers 503 with Retry-After (store.IsUnavailable)
// instead of the client waiting on a frozen database until it gives up.
func deadline(timeout time.Duration) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			ctx, cancel := context.WithTimeout(c.Request().Context(), timeout)
			defer cancel()
			c.SetRequest(c.Request().WithContext(ctx))
			if err := next(c); err != nil {
				c.Error(err) // answered here, before the deferred cancel
			}
			return nil
		}
	}
}

// serving marks the request as being served while it is, so that broad
// matches give way to it (workflow.Service.Serving) — all but the agent's
// long-poll, which mostly waits.
func (h *Handler) serving(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if c.Path() == agentLongPollPath {
			return next(c)
		}
		done := h.wf.Serving()
		defer done()
		return next(c)
	}
}

// agentLongPollPath is the route of the agent's long-poll (routes.go).
const agentLongPollPath = "/agent/v1/assignments"

// logger returns the request's logger.
func logger(c echo.Context) *slog.Logger {
	if l, ok := c.Get(ctxLogger).(*slog.Logger); ok {
		return l
	}
	return slog.Default()
}

// securityHeaders sets the content security policy and friends on every
// response. No inline scripts or styles are allowed by the policy, except
// style attributes, which the pages use for small layout touches.
func (h *Handler) securityHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		hd := c.Response().Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; script-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'self'; object-src 'none'")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "strict-origin-when-cross-origin")
		hd.Set("Cross-Origin-Opener-Policy", "same-origin")
		if h.secure {
			hd.Set("Strict-Transport-Security", "max-age=63072000; includeSubDomains")
		}
		return next(c)
	}
}

// csrf protects every state-changing browser request. The token, which
// forms carry in the _csrf field (scripts in the X-CSRF-Token header), is
// the session's own: the signed-in session's csrf_token, or for a visitor
// one derived from the pre-session id in the signed session cookie. So a
// planted cookie, another browser's token or a logged-out session's token
// is refused, and logging in or out changes the token. A request another
// origin's page sends (Sec-Fetch-Site or Origin) is refused even with a
// valid token: a sibling subdomain is same-site, so SameSite cookies alone
// do not stop it. It runs after loadSession.
func (h *Handler) csrf() echo.MiddlewareFunc {
	cop := http.NewCrossOriginProtection()
	if u, err := url.Parse(h.baseURL); err == nil && u.Host != "" {
		_ = cop.AddTrustedOrigin(u.Scheme + "://" + u.Host) // behind a proxy that rewrites Host
	}
	refuse := func() error {
		return market.Errorf(market.CodeForbidden, "This form has expired or did not come from this site. Go back, reload the page and try again.")
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			switch c.Request().Method {
			case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
				return next(c)
			}
			if err := cop.Check(c.Request()); err != nil {
				return refuse()
			}
			sent := c.Request().Header.Get("X-CSRF-Token")
			if sent == "" {
				sent = c.FormValue("_csrf")
			}
			want := h.csrfToken(c)
			if sent == "" || subtle.ConstantTimeCompare([]byte(sent), []byte(want)) != 1 {
				return refuse()
			}
			return next(c)
		}
	}
}

// csrfToken returns the token the request's forms carry: the signed-in
// session's, or the visitor's pre-session's, starting a pre-session (a
// random id in the signed session cookie, nothing in the database) on
// first use.
func (h *Handler) csrfToken(c echo.Context) string {
	if s, ok := currentSession(c); ok {
		return s.CSRFToken
	}
	sess, _ := h.cookies.Get(c.Request(), sessionCookie)
	pre, _ := sess.Values["pre"].(string)
	if pre == "" {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return "" // matches no token: the form fails closed
		}
		pre = base64.RawURLEncoding.EncodeToString(b)
		sess.Values = map[any]any{"pre": pre}
		sess.Options.MaxAge = int(sessionTTL.Seconds())
		if err := sess.Save(c.Request(), c.Response()); err != nil {
			logger(c).Warn("pre-session not saved", "err", err)
			return ""
		}
	}
	m := hmac.New(sha256.New, h.csrfKey)
	m.Write([]byte(pre))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// loadSession resolves the session cookie to a user through the database,
// so logout, password changes and suspensions take effect at once. What is
// served to a signed-in user is private: no browser or proxy stores it.
func (h *Handler) loadSession(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		sess, _ := h.cookies.Get(c.Request(), sessionCookie)
		if id, ok := sess.Values["sid"].(string); ok && id != "" {
			s, u, err := h.db.FindSession(c.Request().Context(), id, h.now())
			switch {
			case err == nil:
				c.Set(ctxSession, s)
				c.Set(ctxUser, &u)
				c.Response().Header().Set("Cache-Control", "no-store")
			case market.ErrorCode(err) == market.CodeNotFound:
				// Expired, logged out or suspended: forget the cookie.
				sess.Values = map[any]any{}
				sess.Options.MaxAge = -1
				_ = sess.Save(c.Request(), c.Response())
			default:
				return err
			}
		}
		return next(c)
	}
}

// currentUser returns the signed-in user, or nil.
func currentUser(c echo.Context) *market.User {
	u, _ := c.Get(ctxUser).(*market.User)
	return u
}

// currentSession returns the signed-in session.
func currentSession(c echo.Context) (store.Session, bool) {
	s, ok := c.Get(ctxSession).(store.Session)
	return s, ok
}

// requireUser sends a visitor who is not logged in to the login page, and
// back to where they wanted to go afterwards.
func requireUser(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if currentUser(c) == nil {
			target := c.Request().URL.RequestURI()
			if c.Request().Method != http.MethodGet {
				target = c.Request().Referer()
				if u, err := url.Parse(target); err == nil {
					target = u.RequestURI()
				}
			}
			return c.Redirect(http.StatusSeeOther, "/login?next="+url.QueryEscape(safeNext(target)))
		}
		return next(c)
	}
}

// requireProvider lets only providers through.
func requireProvider(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if u := currentUser(c); u == nil || !u.IsProvider {
			return market.Errorf(market.CodeForbidden, "This page is for providers. Turn on listing capacity on your account to use it.")
		}
		return next(c)
	}
}

// requireAdmin lets only admins through.
func requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if u := currentUser(c); u == nil || !u.IsAdmin {
			return market.Errorf(market.CodeForbidden, "This page is for administrators.")
		}
		return next(c)
	}
}

// safeNext keeps a post-login redirect on this site: a path, never a scheme
// or a protocol-relative URL that would leave it.
func safeNext(next string) string {
	if next == "" || !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") ||
		strings.ContainsAny(next, "\r\n\t") {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" {
		return "/"
	}
	if next == "/login" || strings.HasPrefix(next, "/login?") || next == "/logout" {
		return "/"
	}
	return next
}

// refuseUnstorableText refuses an API or agent request any of whose body's
// text — form fields, the strings (keys and values) of a JSON body — is
// not valid UTF-8 or holds a control character other than a line break or
// tab (market.TextProblem): a NUL that SQLite would keep and PostgreSQL
// refuses, or bytes PostgreSQL cannot store, so both engines only ever see
// the same values. The error names the field (400) and nothing is changed.
// The query string and path parameters are refuseUnstorableURL's, which
// runs before it; the pages' forms are refuseUnstorableForm's (web/text.go).
func refuseUnstorableText(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		bad := func(field, msg string) error {
			return &market.Error{Code: market.CodeInvalid, Message: fmt.Sprintf("%s (in %q)", msg, field), Fields: map[string]string{field: msg}}
		}
		if req.Body == nil || req.Method == http.MethodGet || req.Method == http.MethodHead {
			return next(c)
		}
		ct := req.Header.Get(echo.HeaderContentType)
		switch {
		case strings.HasPrefix(ct, echo.MIMEApplicationForm):
			if err := req.ParseForm(); err != nil {
				return next(c) // the handler reports what it cannot read
			}
			if k, msg := valuesTextProblem(req.PostForm, nil); msg != "" {
				return bad(k, msg)
			}
		case strings.HasPrefix(ct, echo.MIMEApplicationJSON) || ct == "":
			body, err := io.ReadAll(req.Body)
			if err != nil {
				return err // over the body limit (413), or the client went away
			}
			req.Body = io.NopCloser(bytes.NewReader(body))
			if len(body) == 0 {
				return next(c)
			}
			if !utf8.Valid(body) {
				return bad("body", "Remove the bytes that are not text (the input is not valid UTF-8).")
			}
			if plainJSONText(body) {
				return next(c)
			}
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.UseNumber()
			var doc any
			if dec.Decode(&doc) != nil {
				return next(c) // not JSON: the handler's decoder says why
			}
			if field, msg := jsonTextProblem("", doc); msg != "" {
				return bad(field, msg)
			}
		}
		return next(c)
	}
}

// plainJSONText reports whether a JSON body (valid UTF-8) holds no text
// that jsonTextProblem could refuse, without decoding it: without a
// backslash every string in it (key or value) is its own bytes, and a
// control character JSON lets stand unescaped inside a string does not
// exist (a raw one there makes the body malformed, for the handler's
// decoder to refuse), so the body's own text passing market.TextProblem
// (line breaks and tabs allowed, as between JSON's tokens) is every
// string's passing. An agent's heartbeat or a quote is such a body: the
// decoding into a generic document below is for the rest, to name the
// field.
func plainJSONText(body []byte) bool {
	return bytes.IndexByte(body, '\\') < 0 && market.TextProblem(string(body), true) == ""
}

// jsonTextProblem finds the first string of a decoded JSON document that
// market.TextProblem refuses, with its path ("request.constraints.notes").
func jsonTextProblem(path string, v any) (string, string) {
	at := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch x := v.(type) {
	case string:
		return path, market.TextProblem(x, true)
	case map[string]any:
		for k, e := range x {
			if msg := market.TextProblem(k, false); msg != "" {
				return at(k), msg
			}
			if f, msg := jsonTextProblem(at(k), e); msg != "" {
				return f, msg
			}
		}
	case []any:
		for i, e := range x {
			if f, msg := jsonTextProblem(at(strconv.Itoa(i)), e); msg != "" {
				return f, msg
			}
		}
	}
	return "", ""
}

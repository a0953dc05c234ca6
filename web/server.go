// Package web serves the marketplace over HTTP with Echo: routes, handlers,
// middleware, sessions and the mapping of market errors to responses.
package web

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gorilla/sessions"
	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/account"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/metrics"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/workflow"
)

// Config is what cmd hands the web layer; it reads no environment itself.
type Config struct {
	BaseURL    string // public base URL, e.g. https://gpumarket.example
	SessionKey []byte // at least 32 bytes; signs the session and flash cookies
	Demo       bool   // show the demo banner
	// PasswordCost is the bcrypt cost of new password hashes; 0 means
	// account.DefaultCost. Tests lower it to keep the suite fast. It is
	// the workflow's (workflow.Config), used when New builds the workflow
	// itself (Workflow nil).
	PasswordCost int
	// APIRatePerSecond is each API token's steady request rate (burst
	// twice that); 0 means 20.
	APIRatePerSecond float64
	// Now returns the current time; nil means time.Now in UTC. Tests fix it.
	Now func() time.Time
	// Workflow runs the multi-step operations and is the only way the web
	// layer changes anything; the process owner builds it and runs its
	// background work. nil means New builds one with the local test
	// processor and Now (tests; nobody runs its background work).
	Workflow *workflow.Service
	// TrustedProxies are the load balancers and proxies whose
	// X-Forwarded-For is believed for the client address (throttles,
	// logs). None means the TCP peer is the client and the header is
	// ignored. Loopback and private addresses are trusted only when listed.
	TrustedProxies []*net.IPNet
	// Metrics records request latency, bookings and quotes; nil records
	// nothing.
	Metrics *metrics.Metrics
	// IndexMaxAge is how old the matcher index may be before /healthz
	// reports this replica unhealthy; 0 means workflow.IndexMaxAge(0).
	IndexMaxAge time.Duration
	// FeedMaxLag is how far behind the change feed (workflow.FeedLag) the
	// index may be before /healthz reports this replica unhealthy; 0 means
	// workflow.DefaultFeedMaxLag.
	FeedMaxLag time.Duration
	// RequestTimeout is every request's deadline (the deadline
	// middleware); 0 means DefaultRequestTimeout.
	RequestTimeout time.Duration
	// QuoteBudget and BroadSlots are the workflow's (workflow.Config),
	// used when New builds the workflow itself (Workflow nil).
	QuoteBudget market.Budget
	BroadSlots  int
}

// Handler holds what the handlers share. It is created once by New.
type Handler struct {
	cfg     Config
	db      *store.DB
	log     *slog.Logger
	cookies *sessions.CookieStore
	// secrets is an encrypted cookie store for a value shown once after a
	// redirect (a new API token): see setNewToken.
	secrets *sessions.CookieStore
	// csrfKey derives a visitor's CSRF token from their pre-session id.
	csrfKey []byte
	secure  bool // base URL is https: Secure cookies and HSTS
	// wf runs the multi-step operations (booking, cancelling, payments,
	// settlement, disputes, reconciliation) and owns the matcher's index.
	wf      *workflow.Service
	baseURL string
	// routeSet holds "METHOD template" of every route, so a request that
	// matched none is measured as one "unmatched" route, not by the
	// nearest template Echo leaves in its context.
	routeSet map[string]bool
	// anonQuotes and userQuotes limit the builder's quotes per client
	// address and per account (the workflow shares the matcher fairly).
	anonQuotes, userQuotes *limiter
	refusals               chan struct{} // the quote refusals being held (holdRefusal)
}

// Limits on abuse, kept together.
const (
	sessionTTL    = account.SessionTTL // the session cookie's life, the session row's
	formBodyLimit = "256K"
	// knownDeviceTTL is how long a browser that logged in to an account is
	// exempt from the account's daily failure limit (account.LoginPerAccount):
	// the signed cookie codec's own limit.
	knownDeviceTTL = 30 * 24 * time.Hour
)

// DefaultRequestTimeout is every request's deadline unless
// Config.RequestTimeout says otherwise: well under the server's write
// timeout, so the answer (a 503 when the database did not answer) still
// reaches the client.
const DefaultRequestTimeout = 20 * time.Second

// New builds the handler and the Echo instance with every route and
// middleware. The periodic work is the workflow's (workflow.Service.Run),
// started and stopped by the process owner.
func New(ctx context.Context, cfg Config, db *store.DB, log *slog.Logger) (*Handler, *echo.Echo, error) {
	if len(cfg.SessionKey) < 32 {
		return nil, nil, errors.New("web: session key must be at least 32 bytes")
	}
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, nil, errors.New("web: base URL must be absolute, e.g. http://localhost:8080")
	}
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return time.Now().UTC() }
	}
	if cfg.IndexMaxAge <= 0 {
		cfg.IndexMaxAge = workflow.IndexMaxAge(0)
	}
	if cfg.FeedMaxLag <= 0 {
		cfg.FeedMaxLag = workflow.DefaultFeedMaxLag
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	h := &Handler{cfg: cfg, db: db, log: log, secure: strings.EqualFold(u.Scheme, "https")}
	if cfg.Workflow == nil {
		cfg.Workflow, err = workflow.New(ctx, workflow.Config{Now: cfg.Now,
			Metrics: cfg.Metrics, BaseURL: cfg.BaseURL, QuoteBudget: cfg.QuoteBudget, BroadSlots: cfg.BroadSlots,
			SessionKey: cfg.SessionKey, PasswordCost: cfg.PasswordCost}, db, log)
		if err != nil {
			return nil, nil, err
		}
	}
	h.wf, h.cfg.Workflow = cfg.Workflow, cfg.Workflow
	h.baseURL = strings.TrimSuffix(cfg.BaseURL, "/")
	h.anonQuotes = newLimiter(anonQuotesPerSecond, anonQuoteBurst)
	h.userQuotes = newLimiter(userQuotesPerSecond, userQuoteBurst)
	h.refusals = make(chan struct{}, refusalsHeld)
	h.cookies = sessions.NewCookieStore(cfg.SessionKey[:32])
	h.cookies.Options = &sessions.Options{
		Path:     "/",
		MaxAge:   int(sessionTTL / time.Second),
		HttpOnly: true,
		Secure:   h.secure,
		SameSite: http.SameSiteLaxMode,
	}
	h.secrets = newSecretStore(cfg.SessionKey, h.secure)
	h.csrfKey = deriveKey(cfg.SessionKey, "gpumarket csrf: pre-session")

	e := echo.New()
	e.IPExtractor = ipExtractor(cfg.TrustedProxies)
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = h.handleError
	h.routes(e)
	h.routeSet = map[string]bool{}
	for _, r := range e.Routes() {
		h.routeSet[r.Method+" "+r.Path] = true
	}
	return h, e, nil
}

// ipExtractor finds the client address for throttling and logs. With no
// trusted proxies it is the TCP peer: X-Forwarded-For is ignored, so it
// cannot dodge a limit. With some, it is the rightmost address in
// X-Forwarded-For (then the peer) that is not a trusted proxy; Echo's
// default trust of loopback, link-local and private addresses is turned
// off, so only the listed ranges are believed.
func ipExtractor(trusted []*net.IPNet) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, n := range trusted {
		opts = append(opts, echo.TrustIPRange(n))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

func (h *Handler) now() time.Time { return h.cfg.Now().UTC() }

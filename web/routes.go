package web

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/gpumarket/gpumarket/static"
)

// routes lists every route of the application, grouped by who may use it.
func (h *Handler) routes(e *echo.Echo) {
	e.Pre(middleware.RemoveTrailingSlashWithConfig(middleware.TrailingSlashConfig{RedirectCode: http.StatusMovedPermanently}))
	e.Use(middleware.RequestID())
	e.Use(h.requestLogger)
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisableStackAll: true, DisablePrintStack: true}))
	e.Use(h.securityHeaders)
	e.Use(deadline(h.cfg.RequestTimeout))
	e.Use(h.serving)

	// Infrastructure: no session, no CSRF.
	e.GET("/healthz", h.handleHealth)
	assets := http.StripPrefix("/static/", http.FileServer(http.FS(static.FS)))
	e.GET("/static/*", echo.WrapHandler(cacheForever(assets)))
	e.GET("/favicon.ico", func(c echo.Context) error { return c.Redirect(http.StatusMovedPermanently, "/static/favicon.svg") })

	// JSON API for programmatic buyers and providers: bearer tokens, no
	// cookies, so no CSRF; rate limited per token.
	api := e.Group("/api/v1", middleware.BodyLimit("1M"), refuseUnstorableURL, refuseUnstorableText, h.apiAuth, h.apiRateLimit())
	api.GET("/ping", h.handleAPIPing)
	api.GET("/offers", h.handleAPIOffers)
	api.POST("/quotes", h.handleAPIQuotes)
	api.GET("/reservations", h.handleAPIReservations)
	api.GET("/reservations/:id", h.handleAPIReservation)
	api.POST("/reservations", h.handleAPIReserve, requireScope(scopeWrite), h.requireVerified)
	api.POST("/reservations/:id/cancel", h.handleAPIReservationCancel, requireScope(scopeWrite))
	api.POST("/reservations/:id/reject", h.handleAPIReservationReject, requireScope(scopeWrite))
	api.POST("/reservations/:id/observations", h.handleAPIObservation, requireScope(scopeWrite)) // the buyer's machine
	api.GET("/reservations/:id/messages", h.handleAPIMessages)                                   // buyer and providers
	api.POST("/reservations/:id/messages", h.handleAPIMessagePost, requireScope(scopeWrite))
	api.GET("/provider/offers", h.handleAPIProviderOffers)
	api.POST("/provider/offers", h.handleAPIOfferCreate, requireScope(scopeWrite), h.requireVerified)
	api.PUT("/provider/offers/:id", h.handleAPIOfferUpdate, requireScope(scopeWrite))
	api.POST("/provider/offers/:id/state", h.handleAPIOfferState, requireScope(scopeWrite))
	api.GET("/templates", h.handleAPITemplates) // environment templates
	api.POST("/templates", h.handleAPITemplateCreate, requireScope(scopeWrite), h.requireVerified)
	api.PUT("/templates/:id", h.handleAPITemplateUpdate, requireScope(scopeWrite))
	api.DELETE("/templates/:id", h.handleAPITemplateDelete, requireScope(scopeWrite))
	api.GET("/orders", h.handleAPIOrders) // standing orders
	api.POST("/orders", h.handleAPIOrderCreate, requireScope(scopeWrite), h.requireVerified)
	api.POST("/orders/:id/cancel", h.handleAPIOrderCancel, requireScope(scopeWrite))
	api.GET("/spot/bids", h.handleAPISpotBids) // spot market
	api.POST("/spot/bids", h.handleAPISpotBidCreate, requireScope(scopeWrite), h.requireVerified)
	api.POST("/spot/bids/:id/cancel", h.handleAPISpotBidCancel, requireScope(scopeWrite))
	api.GET("/offers/:id/spot/indicative", h.handleAPISpotIndicative)

	// The provider agent (docs/agent.md): host tokens per node, no cookies,
	// so no CSRF; rate limited per token.
	agent := e.Group("/agent/v1", middleware.BodyLimit(agentBodyLimit), refuseUnstorableURL, refuseUnstorableText, h.agentAuth, h.agentRateLimit())
	agent.POST("/heartbeat", h.handleAgentHeartbeat)
	agent.GET("/assignments", h.handleAgentAssignments)
	agent.POST("/assignments/:piece_id/installed", h.handleAgentInstalled)
	agent.POST("/assignments/:piece_id/removed", h.handleAgentRemoved)
	agent.POST("/assignments/:piece_id/remove_failed", h.handleAgentRemoveFailed)
	agent.POST("/assignments/:piece_id/acceptance", h.handleAgentAcceptance)
	agent.POST("/assignments/:piece_id/container", h.handleAgentContainer)

	// Browser pages: size limit, session, then CSRF (its token is the
	// session's); text that cannot be stored is refused once the session is
	// known, so the error page keeps the visitor signed in (web/text.go).
	b := e.Group("", middleware.BodyLimit(formBodyLimit), h.loadSession, refuseUnstorableURL, h.csrf(), refuseUnstorableForm)

	// The command-line client's routes: pay
	// with the saved card, extend, resale, the provider's hosts. The API's
	// contract (web/openapi.json, checked against this table by a test) is
	// public, as is its reference page.
	api.POST("/reservations/:id/pay", h.handleAPIPaySaved, requireScope(scopeWrite))
	api.GET("/reservations/:id/extension", h.handleAPIExtensionQuote)
	api.POST("/reservations/:id/extend", h.handleAPIExtend, requireScope(scopeWrite), h.requireVerified)
	api.GET("/resale", h.handleAPIResaleList)
	api.POST("/reservations/:id/resale", h.handleAPIResaleCreate, requireScope(scopeWrite), h.requireVerified)
	api.POST("/resale/:id/withdraw", h.handleAPIResaleWithdraw, requireScope(scopeWrite))
	api.POST("/resale/:id/buy", h.handleAPIResaleBuy, requireScope(scopeWrite), h.requireVerified)
	api.GET("/balance", h.handleAPIBalance)
	api.PUT("/balance/auto-top-up", h.handleAPIAutoTopUp, requireScope(scopeWrite), h.requireVerified)
	api.POST("/offers/:id/metered", h.handleAPIMeteredStart, requireScope(scopeWrite), h.requireVerified)
	api.POST("/reservations/:id/stop", h.handleAPIMeteredStop, requireScope(scopeWrite))
	api.GET("/provider/hosts", h.handleAPIHosts)
	api.POST("/provider/hosts/tokens", h.handleAPIHostTokenCreate, requireScope(scopeWrite), h.requireVerified)
	e.GET("/api/v1/openapi.json", h.handleOpenAPI)
	b.GET("/docs/api", h.handleAPIReference)

	// Public.
	b.GET("/", h.handleCatalogue)
	b.GET("/offers/:id", h.handleOfferShow)
	b.GET("/signup", h.handleSignUpForm)
	b.POST("/signup", h.handleSignUp)
	b.GET("/login", h.handleLoginForm)
	b.POST("/login", h.handleLogin)
	b.POST("/logout", h.handleLogout)

	// Recovery and verification: the links mailed to an address
	// work without a session; each is single-use and short-lived. Booking,
	// listing, payouts and whatever acts for the account (tokens, SSH keys,
	// cards, bids, orders, resale) need a confirmed address
	// (requireVerified, over market.User.MayAct; the store checks it too).
	b.GET("/signup/sent", h.handleSignUpSent)
	b.GET("/verify", h.handleVerify)
	b.GET("/password/forgot", h.handleForgotForm)
	b.POST("/password/forgot", h.handleForgot)
	b.GET("/password/forgot/sent", h.handleForgotSent)
	b.GET("/password/reset", h.handleResetForm)
	b.POST("/password/reset", h.handleReset)
	b.GET("/account/email/confirm", h.handleAddressConfirm)
	b.POST("/account/email", h.handleAddressChange, requireUser)
	b.POST("/account/verify/resend", h.handleVerifyResend, requireUser)
	// The second step of logging in to an account with two-factor sign-in:
	// only a half-done login (its cookie) may enter a code here.
	b.GET("/login/code", h.handleLoginCodeForm)
	b.POST("/login/code", h.handleLoginCode)

	// Market data: the public price index and forward curve, their
	// methodology and downloads; buyers' measured-work reports;
	// providers' hourly carbon profiles.
	b.GET("/market", h.handleMarket)
	b.GET("/market/index.json", h.handleMarketJSON)
	b.GET("/market/index.csv", h.handleMarketCSV)
	b.GET("/market/forward.json", h.handleForwardJSON)
	b.GET("/market/forward.csv", h.handleForwardCSV)
	b.GET("/market/spot.json", h.handleSpotJSON) // spot market
	b.GET("/market/spot.csv", h.handleSpotCSV)
	b.GET("/market/methodology", h.handleMethodology)
	b.POST("/reservations/:id/work", h.handleWorkReport, requireUser)
	b.POST("/reservations/:id/observations", h.handleObservation, requireUser)
	b.GET("/provider/offers/:id/carbon", h.handleCarbonProfileForm, requireUser, requireProvider)
	b.POST("/provider/offers/:id/carbon", h.handleCarbonProfileSave, requireUser, requireProvider)
	b.POST("/provider/offers/:id/carbon/delete", h.handleCarbonProfileDelete, requireUser, requireProvider)

	// Buyers: the request builder and quotes are public; booking needs an account.
	b.GET("/requests", h.handleRequestBuilder)
	b.GET("/requests/export", h.handleRequestExport)
	b.POST("/requests/upload", h.handleRequestUpload)
	b.POST("/requests/saved", h.handleRequestSave, requireUser)
	b.GET("/requests/saved/:id", h.handleRequestOpen, requireUser)
	b.POST("/requests/saved/:id/delete", h.handleRequestDelete, requireUser)
	// Environment templates (docs/runtime.md).
	b.GET("/templates", h.handleTemplates, requireUser)
	b.POST("/templates", h.handleTemplateSave, requireUser)
	b.GET("/templates/:id/edit", h.handleTemplateEdit, requireUser)
	b.POST("/templates/:id", h.handleTemplateUpdate, requireUser)
	b.POST("/templates/:id/delete", h.handleTemplateDelete, requireUser)
	b.POST("/reservations", h.handleReserve, requireUser, h.requireVerified)
	b.GET("/reservations", h.handleReservations, requireUser)
	b.GET("/reservations/:id", h.handleReservationShow, requireUser)
	b.GET("/reservations/:id/cancel", h.handleReservationCancelConfirm, requireUser)
	b.POST("/reservations/:id/cancel", h.handleReservationCancel, requireUser)
	b.GET("/reservations/:id/reject", h.handleReservationRejectConfirm, requireUser)
	b.POST("/reservations/:id/reject", h.handleReservationReject, requireUser)
	b.GET("/reservations/:id/extend", h.handleExtendConfirm, requireUser)
	b.POST("/reservations/:id/extend", h.handleExtend, requireUser)
	// Metered rentals and the prepaid balance (docs/metered.md).
	b.GET("/balance", h.handleBalance, requireUser)
	b.POST("/balance/top-up", h.handleTopUp, requireUser, h.requireVerified)
	b.POST("/balance/top-up/checkout", h.handleTopUpCheckout, requireUser, h.requireVerified)
	b.GET("/balance/top-up/return", h.handleTopUpReturn, requireUser)
	b.POST("/balance/refund", h.handleBalanceRefund, requireUser)
	b.POST("/balance/auto-top-up", h.handleAutoTopUp, requireUser, h.requireVerified)
	b.POST("/offers/:id/metered", h.handleMeteredStart, requireUser, h.requireVerified)
	b.POST("/reservations/:id/stop", h.handleMeteredStop, requireUser)
	b.POST("/provider/offers/:id/metered", h.handleOfferMetered, requireUser, requireProvider)
	// A reservation's messages: its buyer and providers (the store checks
	// who is a party); admins read them under /admin.
	b.GET("/reservations/:id/messages", h.handleMessages, requireUser)
	b.POST("/reservations/:id/messages", h.handleMessagePost, requireUser)
	// Replacement after a host failure: the buyer confirms the
	// one offered under the ask policy (the store checks whose).
	b.GET("/replacements/:id", h.handleReplacementShow, requireUser)
	b.POST("/replacements/:id/confirm", h.handleReplacementConfirm, requireUser)

	// Standing orders: a request left standing until a quote
	// within its limit appears; a buyer sees and cancels only their own.
	b.POST("/orders", h.handleOrderCreate, requireUser, h.requireVerified)
	b.GET("/orders", h.handleOrders, requireUser)
	b.POST("/orders/:id/cancel", h.handleOrderCancel, requireUser)
	// Spot market: bids for interruptible capacity on an
	// offer's page; the buyer's own bids (the store checks whose).
	b.POST("/offers/:id/spot-bids", h.handleSpotBid, requireUser, h.requireVerified)
	b.GET("/spot", h.handleSpotBids, requireUser)
	b.POST("/spot/bids/:id/cancel", h.handleSpotBidCancel, requireUser)
	// Resale of reserved time: listing and withdrawing need the
	// reservation's holder (the store checks whose it is); the list and a
	// listing are public; buying needs a confirmed address and a saved card.
	b.GET("/reservations/:id/resale", h.handleResaleForm, requireUser)
	b.POST("/reservations/:id/resale", h.handleResaleCreate, requireUser, h.requireVerified)
	b.POST("/resale/:id/withdraw", h.handleResaleWithdraw, requireUser)
	b.GET("/resale", h.handleResaleList)
	b.GET("/resale/:id", h.handleResaleShow)
	b.POST("/resale/:id/buy", h.handleResaleBuy, requireUser, h.requireVerified)

	// Any signed-in user. (Per route, not a group: a group with an empty
	// prefix would catch every unknown path and send it to log in.)
	b.GET("/account", h.handleAccount, requireUser)
	b.POST("/account/password", h.handlePasswordChange, requireUser)
	b.POST("/account/tokens", h.handleTokenCreate, requireUser, h.requireVerified)
	b.POST("/account/tokens/:id/revoke", h.handleTokenRevoke, requireUser)
	b.POST("/account/ssh-keys", h.handleSSHKeyAdd, requireUser, h.requireVerified)
	b.POST("/account/ssh-keys/:id/remove", h.handleSSHKeyRemove, requireUser)
	b.GET("/account/two-factor", h.handleTwoFactor, requireUser)
	b.POST("/account/two-factor", h.handleTwoFactorStart, requireUser)
	b.POST("/account/two-factor/confirm", h.handleTwoFactorConfirm, requireUser)
	b.POST("/account/two-factor/disable", h.handleTwoFactorDisable, requireUser)
	b.GET("/notifications", h.handleNotifications, requireUser)
	b.POST("/notifications/read", h.handleNotificationsRead, requireUser)
	// E-mail: preferences; in demo mode, the demo mailbox (the
	// reader's own mail; an admin's, everyone's).
	b.GET("/account/mail", h.handleMailPrefs, requireUser)
	b.POST("/account/mail", h.handleMailPrefsSave, requireUser)
	b.GET("/mailbox", h.handleMailbox, requireUser)
	b.GET("/mailbox/:id", h.handleMailboxShow, requireUser)

	// Disputes: the buyer opens one on a paid reservation; the buyer and the
	// reservation's providers add statements (the store checks who is a party).
	b.GET("/reservations/:id/disputes/new", h.handleDisputeNew, requireUser)
	b.POST("/reservations/:id/disputes", h.handleDisputeOpen, requireUser)
	b.GET("/disputes/:id", h.handleDisputeShow, requireUser)
	b.POST("/disputes/:id/statements", h.handleDisputeStatement, requireUser)

	// Providers: their own offers only.
	p := b.Group("/provider", requireUser, requireProvider)
	p.GET("/offers", h.handleProviderOffers)
	p.GET("/offers/new", h.handleOfferNew, h.requireVerified)
	p.POST("/offers", h.handleOfferCreate, h.requireVerified)
	p.GET("/offers/:id/edit", h.handleOfferEdit)
	p.POST("/offers/:id", h.handleOfferUpdate)
	p.POST("/offers/:id/state", h.handleOfferState)
	p.GET("/reservations", h.handleProviderReservations)
	p.GET("/hosts", h.handleProviderHosts)
	p.POST("/hosts/tokens", h.handleHostTokenCreate, h.requireVerified)
	p.POST("/hosts/tokens/:id/revoke", h.handleHostTokenRevoke)

	// Admins, with two-factor sign-in on (an admin without it is sent to set
	// it up). Everything under /admin goes through this group (a test walks
	// the route table to check); nothing here edits or deletes the audit trail.
	a := b.Group("/admin", requireUser, requireAdmin, h.requireTwoFactor)
	a.GET("/offers", h.handleAdminOffers)
	a.POST("/offers/:id/review", h.handleAdminReview)
	a.POST("/offers/:id/verify", h.handleAdminVerifyFigure)
	a.GET("/providers", h.handleAdminProviders)
	a.POST("/providers/:id/suspend", h.handleAdminSuspend)
	a.POST("/providers/:id/reinstate", h.handleAdminReinstate)
	a.POST("/flags/:id/clear", h.handleAdminClearFlag)
	a.GET("/audit", h.handleAdminAudit)
	a.GET("/disputes", h.handleAdminDisputes)
	a.GET("/disputes/:id", h.handleAdminDispute)
	a.POST("/disputes/:id/decide", h.handleAdminDisputeDecide)
	a.POST("/disputes/:id/refund", h.handleAdminDisputeRefund)
	a.GET("/reservations/:id", h.handleAdminReservation)
	a.POST("/reservations/:id/incidents/:incident/replace", h.handleAdminReplace)
	a.GET("/reservations/:id/messages", h.handleAdminMessages)
	a.GET("/hosts", h.handleAdminHosts)
	a.GET("/mail", h.handleAdminMail)
	a.GET("/mail/:id", h.handleAdminMailShow)
	a.POST("/mail/:id/retry", h.handleAdminMailRetry)

	// Billing: payment, payouts, incidents, settlement and
	// reconciliation. The processor's webhook is outside CSRF and sessions,
	// verified by its signature instead, with its own small body limit.
	e.POST("/webhooks/stripe", h.handleStripeWebhook, middleware.BodyLimit(webhookBodyLimit))
	b.POST("/reservations/:id/pay", h.handlePay, requireUser)
	b.GET("/pay/local/:id", h.handleLocalPayPage, requireUser)
	b.POST("/pay/local/:id", h.handleLocalPay, requireUser)
	b.GET("/reservations/:id/incidents/new", h.handleBuyerIncidentForm, requireUser)
	b.POST("/reservations/:id/incidents", h.handleBuyerIncident, requireUser)
	b.GET("/reservations/:id/statement", h.handleBuyerStatement, requireUser)
	b.GET("/connect/local/:id", h.handleLocalOnboardPage, requireUser, requireProvider)
	b.POST("/connect/local/:id", h.handleLocalOnboard, requireUser, requireProvider)
	p.POST("/payouts/connect", h.handlePayoutConnect, h.requireVerified)
	p.GET("/payouts/refresh", h.handlePayoutRefresh)
	p.GET("/payouts/return", h.handlePayoutReturn)
	p.GET("/bookings/:id", h.handleProviderBooking)
	p.GET("/bookings/:id/incidents/new", h.handleProviderIncidentForm)
	p.POST("/bookings/:id/incidents", h.handleProviderIncident)
	p.GET("/bookings/:id/statement", h.handleProviderStatement)
	p.POST("/incidents/:id/acknowledge", h.handleIncidentAcknowledge)
	p.POST("/bookings/:id/incidents/:incident/notes", h.handleIncidentNote)
	a.GET("/reconciliation", h.handleAdminReconciliation)
	a.POST("/settlements/:id/retry", h.handleAdminSettlementRetry)
	// Saved payment methods: cards saved through the processor's
	// setup page, removed by their owner only; a held reservation paid at
	// once with the default card; the local processor's card page.
	b.POST("/account/payment-methods", h.handlePaymentMethodAdd, requireUser, h.requireVerified)
	b.GET("/account/payment-methods/return", h.handlePaymentMethodReturn, requireUser)
	b.POST("/account/payment-methods/:id/remove", h.handlePaymentMethodRemove, requireUser)
	b.POST("/reservations/:id/pay-saved", h.handlePaySaved, requireUser)
	b.GET("/setup/local/:id", h.handleLocalSetupPage, requireUser)
	b.POST("/setup/local/:id", h.handleLocalSetup, requireUser, h.requireVerified)
}

// cacheForever marks versioned static assets as immutable.
func cacheForever(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		next.ServeHTTP(w, r)
	})
}

// handleHealth tells a load balancer whether this replica can serve: the
// database answers, its matcher index was loaded within IndexMaxAge, and
// the change feed (PostgreSQL) is joined and no further behind than
// FeedMaxLag — else its quotes may offer capacity taken on other replicas
// or miss capacity freed there. A feed that was lost counts as down until
// it has reconnected and the index has been reloaded.
func (h *Handler) handleHealth(c echo.Context) error {
	age := h.wf.IndexAge()
	lag, joined := h.wf.FeedLag()
	b := healthBody{Status: "ok", Database: "ok", Index: "ok", IndexAgeSeconds: int64(age.Seconds()), IndexOffers: h.wf.Index().Len(),
		Feed: "ok", FeedLagMillis: lag.Milliseconds()}
	ping, cancel := context.WithTimeout(c.Request().Context(), healthPingTimeout)
	defer cancel()
	if err := h.db.Ping(ping); err != nil {
		logger(c).Error("health: database unreachable", "err", err)
		b.Status, b.Database = "unavailable", "unreachable"
	}
	if age > h.cfg.IndexMaxAge {
		logger(c).Error("health: matcher index stale", "age", age.String(), "max_age", h.cfg.IndexMaxAge.String())
		b.Status, b.Index = "unavailable", "stale"
	}
	switch {
	case !joined:
		logger(c).Error("health: change feed down", "down_for", lag.String())
		b.Status, b.Feed = "unavailable", "down"
	case lag > h.cfg.FeedMaxLag:
		logger(c).Error("health: change feed lagging", "lag", lag.String(), "max_lag", h.cfg.FeedMaxLag.String())
		b.Status, b.Feed = "unavailable", "lagging"
	}
	if b.Status != "ok" {
		return c.JSON(http.StatusServiceUnavailable, b)
	}
	return c.JSON(http.StatusOK, b)
}

// healthPingTimeout bounds the database ping of /healthz: a database that
// does not answer within it is reported unreachable (503), well before a
// load balancer's own check times out.
const healthPingTimeout = 2 * time.Second

type healthBody struct {
	Status          string `json:"status"`   // ok or unavailable
	Database        string `json:"database"` // ok or unreachable
	Index           string `json:"index"`    // ok or stale
	IndexAgeSeconds int64  `json:"index_age_seconds"`
	IndexOffers     int    `json:"index_offers"`
	Feed            string `json:"feed"`            // ok, lagging or down (always ok on SQLite)
	FeedLagMillis   int64  `json:"feed_lag_millis"` // oldest unapplied change's age, or how long the feed has been down
}

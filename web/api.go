package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// API token scopes.
const (
	scopeRead  = "read"
	scopeWrite = "write"
)

const ctxToken = "api_token"

// apiAuth authenticates a personal API token from the Authorization header
// ("Bearer gpm_…"). The token row and its user are read from the database
// on every request, so revocation and suspension take effect at once.
func (h *Handler) apiAuth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		raw, ok := strings.CutPrefix(c.Request().Header.Get(echo.HeaderAuthorization), "Bearer ")
		if !ok || raw == "" {
			return market.Errorf(market.CodeUnauthorized, "Send a personal API token as \"Authorization: Bearer <token>\"; create one on your account page.")
		}
		tok, u, err := h.wf.Authenticate(c.Request().Context(), strings.TrimSpace(raw))
		if err != nil {
			return err
		}
		c.Set(ctxToken, tok)
		c.Set(ctxUser, &u)
		return next(c)
	}
}

// requireScope refuses a read-only token on routes that change things.
func requireScope(scope string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			tok, _ := c.Get(ctxToken).(store.APIToken)
			if scope == scopeWrite && tok.Scope != scopeWrite {
				return market.Errorf(market.CodeForbidden, "This token is read-only; create a write token to change things.")
			}
			return next(c)
		}
	}
}

// apiRateLimit limits each token to a steady rate with a burst, and
// says in Retry-After when to come back. The limit protects the service;
// it is kept per process (see limiter).
func (h *Handler) apiRateLimit() echo.MiddlewareFunc {
	perSecond := h.cfg.APIRatePerSecond
	if perSecond <= 0 {
		perSecond = 20
	}
	l := newLimiter(perSecond, int(2*perSecond))
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			tok, _ := c.Get(ctxToken).(store.APIToken)
			if ok, wait := l.allow("token:"+strconv.FormatInt(tok.ID, 10), h.now()); !ok {
				setRetryAfter(c, wait)
				return market.Errorf(market.CodeRateLimited, "Too many requests for this token; slow down.")
			}
			return next(c)
		}
	}
}

// decodeBody reads a JSON body strictly into v: unknown fields and
// trailing data are errors naming what was wrong.
func decodeBody(c echo.Context, v any) error {
	data, err := readBody(c)
	if err != nil {
		return err
	}
	return decodeStrict(data, v)
}

// readBody reads a request body of at most market.MaxJSONBytes (and one).
func readBody(c echo.Context) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(c.Request().Body, market.MaxJSONBytes+1))
	if err != nil {
		return nil, market.Errorf(market.CodeInvalid, "The request body could not be read.")
	}
	return data, nil
}

// decodeStrict decodes one JSON value from data into v as decodeBody does.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &market.Error{Code: market.CodeInvalid, Message: "The JSON body is malformed: " + jsonProblem(err), Fields: jsonProblemField(err)}
	}
	// One value only: anything after it (a second object, stray text) is
	// refused, as market.DecodeRequestJSON refuses it on the other routes.
	if _, err := dec.Token(); err != io.EOF {
		return &market.Error{Code: market.CodeInvalid, Message: "The JSON body is malformed: trailing data after the JSON object.",
			Fields: map[string]string{"body": "trailing data after the JSON object"}}
	}
	return nil
}

func jsonProblem(err error) string {
	switch e := err.(type) {
	case *json.SyntaxError:
		return fmt.Sprintf("syntax error at byte %d", e.Offset)
	case *json.UnmarshalTypeError:
		return fmt.Sprintf("field %q has the wrong type (want %s)", e.Field, e.Type)
	}
	if s, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return "unknown field " + s
	}
	return "it is not a JSON object"
}

func jsonProblemField(err error) map[string]string {
	switch e := err.(type) {
	case *json.UnmarshalTypeError:
		return map[string]string{e.Field: "wrong type, want " + e.Type.String()}
	}
	if s, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return map[string]string{strings.Trim(s, `"`): "unknown field"}
	}
	return map[string]string{"body": jsonProblem(err)} // a syntax error: the body as a whole
}

// handleAPIPing answers 200 once the token is accepted: a client's check
// of its token, and the load test's yardstick for the API's fixed cost.
func (h *Handler) handleAPIPing(c echo.Context) error {
	return writeJSON(c, http.StatusOK, apiPing{Status: "ok"})
}

type apiPing struct {
	Status string `json:"status"`
}

// apiOffer is an offer in API responses: ids and state around the
// portable contract document.
type apiOffer struct {
	ID         int64           `json:"id"`
	ProviderID int64           `json:"provider_id"`
	Provider   string          `json:"provider,omitempty"`
	Review     string          `json:"review"`
	ReviewNote string          `json:"review_note,omitempty"`
	State      string          `json:"state"`
	Contract   json.RawMessage `json:"contract"`
}

func toAPIOffer(o market.Offer, provider string) (apiOffer, error) {
	doc, err := market.EncodeOfferJSON(o)
	if err != nil {
		return apiOffer{}, err
	}
	return apiOffer{ID: o.ID, ProviderID: o.ProviderID, Provider: provider, Review: string(o.Review),
		ReviewNote: o.ReviewNote, State: string(o.State), Contract: doc}, nil
}

type apiOfferList struct {
	Offers []apiOffer `json:"offers"`
	Total  int        `json:"total"`
}

// Bounds of the offers list's limit and offset.
const (
	apiMaxLimit  = 200
	apiMaxOffset = 10_000_000
)

// apiInt reads an integer query parameter: empty is def; anything but a
// whole number from lo to hi is an invalid error naming the parameter.
func apiInt(name, s string, def, lo, hi int) (int, error) {
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		msg := fmt.Sprintf("must be a whole number from %d to %d", lo, hi)
		return 0, &market.Error{Code: market.CodeInvalid, Message: name + ": " + msg, Fields: map[string]string{name: msg}}
	}
	return n, nil
}

// handleAPIOffers searches the catalogue with the catalogue's query
// parameters (q, the query language; model, family, min_memory,
// min_devices, region, country, max_price, interruptible, network, sort)
// plus limit and offset. A bad parameter is a 400 naming it; a bad query's
// message names the character, the token and what was expected.
func (h *Handler) handleAPIOffers(c echo.Context) error {
	f, _, errs := readCatalogueFilter(c.QueryParams())
	if len(errs) > 0 {
		msg := "Some query parameters are invalid."
		if len(errs) == 1 {
			for k, m := range errs {
				msg = k + ": " + m
			}
		}
		return &market.Error{Code: market.CodeInvalid, Message: msg, Fields: errs}
	}
	f.Now = h.now()
	var err error
	if f.Limit, err = apiInt("limit", c.QueryParam("limit"), 50, 1, apiMaxLimit); err != nil {
		return err
	}
	if f.Offset, err = apiInt("offset", c.QueryParam("offset"), 0, 0, apiMaxOffset); err != nil {
		return err
	}
	listings, total, err := h.db.FindOffers(c.Request().Context(), f)
	if err != nil {
		return err
	}
	out := apiOfferList{Offers: []apiOffer{}, Total: total}
	for _, l := range listings {
		// The access instructions are for the offer's buyers once they
		// have paid (the reservation page), not for the catalogue.
		l.Offer.AccessInstructions = ""
		o, err := toAPIOffer(l.Offer, providerName(l))
		if err != nil {
			return err
		}
		out.Offers = append(out.Offers, o)
	}
	return writeJSON(c, http.StatusOK, out)
}

// apiQuote is one quote in API responses. QuoteID books it until
// ValidUntil (market.QuoteValidity after QuotedAt) while its capacity and
// prices hold.
type apiQuote struct {
	QuoteID               string       `json:"quote_id"`
	QuotedAt              time.Time    `json:"quoted_at"`
	ValidUntil            time.Time    `json:"valid_until"`
	Rank                  int          `json:"rank"`
	Pieces                []apiPiece   `json:"pieces"`
	Cost                  apiCost      `json:"cost"`
	ChargedCents          market.Cents `json:"charged_cents"`
	CentsPerRefDeviceHour market.Cents `json:"cents_per_reference_device_hour,omitempty"`
	EmissionsKgCO2e       string       `json:"emissions_kg_co2e"`
	ReliabilityBP         int          `json:"reliability_bp"`
	Providers             int          `json:"providers"`
	Start                 time.Time    `json:"start"`
	End                   time.Time    `json:"end"`
	Exact                 bool         `json:"exact"`
	LowerBoundCents       market.Cents `json:"lower_bound_cents,omitempty"`
}

type apiPiece struct {
	OfferID       int64        `json:"offer_id"`
	ProviderID    int64        `json:"provider_id"`
	Accelerator   string       `json:"accelerator"`
	Region        string       `json:"region"`
	Devices       int          `json:"devices"`
	Start         time.Time    `json:"start"`
	End           time.Time    `json:"end"`
	Interruptible bool         `json:"interruptible"`
	PriceCents    market.Cents `json:"price_cents_per_device_hour"`
	Cost          apiCost      `json:"cost"`
}

type apiCost struct {
	Instance      market.Cents `json:"instance_cents"`
	Storage       market.Cents `json:"storage_cents"`
	Egress        market.Cents `json:"egress_cents"`
	Orchestration market.Cents `json:"orchestration_cents"`
	FailedWork    market.Cents `json:"expected_failed_work_cents"`
	Restart       market.Cents `json:"restart_cents"`
	Total         market.Cents `json:"total_cents"`
}

func toAPICost(c market.CostBreakdown) apiCost {
	return apiCost{Instance: c.Instance, Storage: c.Storage, Egress: c.Egress, Orchestration: c.Orchestration,
		FailedWork: c.FailedWork, Restart: c.Restart, Total: c.Total}
}

type apiQuotes struct {
	Quotes      []apiQuote     `json:"quotes"`
	Total       int            `json:"total"`
	Explanation apiExplanation `json:"explanation"`
	Search      apiSearch      `json:"search"`
	// OnFailure says in one sentence what happens if a host fails under
	// the request's replacement terms (market.Replacement.Sentence).
	OnFailure string `json:"on_failure"`
}

// apiSearch says whether the matcher examined every offer the request
// could use (complete) or, over its work budget, only those with the
// lowest prices: then the quotes are the best among them, total and the
// counts are lower bounds, and message says what to do. Exhaustive is
// false also when the search stopped early, once none of the offers
// left (not_evaluated) could rank among the quotes: the quotes are then
// exactly the best, and total and the counts are "at least".
type apiSearch struct {
	Complete              bool         `json:"complete"`
	Exhaustive            bool         `json:"exhaustive"`
	NotEvaluated          int          `json:"not_evaluated,omitempty"`
	Examined              int          `json:"examined,omitempty"`
	NotExamined           int          `json:"not_examined,omitempty"`
	PriceCeilingCents     market.Cents `json:"price_ceiling_cents,omitempty"`
	RelaxationsIncomplete bool         `json:"relaxations_incomplete,omitempty"`
	Message               string       `json:"message,omitempty"`
}

type apiExplanation struct {
	Summary     string          `json:"summary"`
	Considered  int             `json:"considered"`
	Fit         int             `json:"fit"`
	Eliminated  map[string]int  `json:"eliminated"`
	Shortfall   string          `json:"shortfall,omitempty"`
	Relaxations []apiRelaxation `json:"relaxations,omitempty"`
}

type apiRelaxation struct {
	Constraint string          `json:"constraint"`
	Message    string          `json:"message"`
	Quotes     int             `json:"quotes"`
	Request    json.RawMessage `json:"request"`
}

// handleAPIQuotes quotes a request given as the portable JSON.
func (h *Handler) handleAPIQuotes(c echo.Context) error {
	data, err := io.ReadAll(io.LimitReader(c.Request().Body, market.MaxJSONBytes+1))
	if err != nil {
		return market.Errorf(market.CodeInvalid, "The request body could not be read.")
	}
	req, err := market.DecodeRequestJSON(data)
	if err != nil {
		return err
	}
	out, err := h.apiQuotes(c, req)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, out)
}

// apiQuotes runs the matcher as the browser's builder does (with the
// carbon-aware start when asked), so a quote id books the same way from both.
func (h *Handler) apiQuotes(c echo.Context, req market.Request) (apiQuotes, error) {
	now := h.now()
	res, _, err := h.wf.Quote(c.Request().Context(), req, now)
	if err != nil {
		return apiQuotes{}, err
	}
	h.cfg.Metrics.Quoted("api", len(res.Quotes) > 0)
	out := apiQuotes{Quotes: []apiQuote{}, Total: res.Total, OnFailure: req.Replacement.Sentence(), Explanation: apiExplanation{
		Summary: res.Explanation.Summary(), Considered: res.Explanation.Considered, Fit: res.Explanation.Fit,
		Eliminated: map[string]int{}, Shortfall: res.Explanation.Shortfall,
	}}
	for _, el := range res.Explanation.Eliminated {
		out.Explanation.Eliminated[string(el.Constraint)] = el.Count
	}
	cut := res.Explanation.Cut
	out.Search = apiSearch{Complete: !cut.Partial(), Exhaustive: res.Exhaustive, NotEvaluated: res.Explanation.Skipped,
		Examined: cut.Examined, NotExamined: cut.Unexamined,
		PriceCeilingCents: cut.PriceCeiling, RelaxationsIncomplete: cut.Relaxations, Message: cut.Message()}
	for _, r := range res.Explanation.Relaxations {
		doc, err := market.EncodeRequestJSON(r.Request)
		if err != nil {
			return apiQuotes{}, err
		}
		out.Explanation.Relaxations = append(out.Explanation.Relaxations, apiRelaxation{Constraint: string(r.Constraint), Message: r.Message, Quotes: r.Offers, Request: doc})
	}
	for _, q := range res.Quotes {
		key := market.NewQuoteKey(q, now)
		aq := apiQuote{
			QuoteID: key.String(), QuotedAt: key.QuotedAt, ValidUntil: key.ValidUntil(), Rank: q.Rank, Cost: toAPICost(q.Cost),
			ChargedCents: q.Cost.Charged(), CentsPerRefDeviceHour: q.CentsPerRefDeviceHour,
			EmissionsKgCO2e: q.EmissionsKg(), ReliabilityBP: q.ReliabilityBP, Providers: q.Providers,
			Start: q.Start, End: q.End, Exact: q.Exact,
		}
		if !q.Exact {
			aq.LowerBoundCents = q.LowerBound
		}
		for _, p := range q.Pieces {
			aq.Pieces = append(aq.Pieces, apiPiece{OfferID: p.OfferID, ProviderID: p.ProviderID, Accelerator: p.AcceleratorID,
				Region: p.RegionID, Devices: p.Devices, Start: p.Start, End: p.End, Interruptible: p.Interruptible,
				PriceCents: p.PriceCents, Cost: toAPICost(p.Cost)})
		}
		out.Quotes = append(out.Quotes, aq)
	}
	return out, nil
}

// apiBooking is the body of POST /api/v1/reservations.
type apiBooking struct {
	Request json.RawMessage `json:"request"`
	QuoteID string          `json:"quote_id"`
}

type apiReservation struct {
	ID             int64        `json:"id"`
	State          string       `json:"state"`
	AmountCents    market.Cents `json:"amount_cents"`
	CancelFeeCents market.Cents `json:"cancel_fee_cents,omitempty"`
	// RejectedAt is when the buyer rejected the rental in its acceptance
	// period (the state is then cancelled, refunded in full).
	RejectedAt *time.Time `json:"rejected_at,omitempty"`
	// RejectUntil is the end of the acceptance period of a paid rental:
	// from its start until then it can be rejected for a full refund
	// (POST /api/v1/reservations/:id/reject).
	RejectUntil   *time.Time            `json:"reject_until,omitempty"`
	HoldExpiresAt *time.Time            `json:"hold_expires_at,omitempty"`
	Pieces        []apiReservationPiece `json:"pieces"`
	CreatedAt     time.Time             `json:"created_at"`
}

type apiReservationPiece struct {
	OfferID       int64        `json:"offer_id"`
	Devices       int          `json:"devices"`
	Start         time.Time    `json:"start"`
	End           time.Time    `json:"end"`
	Interruptible bool         `json:"interruptible"`
	PriceCents    market.Cents `json:"price_cents_per_device_hour"`
	AmountCents   market.Cents `json:"amount_cents"`
}

func toAPIReservation(r market.Reservation) apiReservation {
	out := apiReservation{ID: r.ID, State: string(r.State), AmountCents: r.AmountCents, CancelFeeCents: r.CancelFeeCents,
		CreatedAt: r.CreatedAt, Pieces: []apiReservationPiece{}}
	if r.State == market.ReservationHeld {
		t := r.HoldExpiresAt
		out.HoldExpiresAt = &t
	}
	if !r.RejectedAt.IsZero() {
		t := r.RejectedAt
		out.RejectedAt = &t
	}
	if _, until, ok := market.RejectionWindow(r); ok && (r.State == market.ReservationConfirmed || r.State == market.ReservationActive) {
		out.RejectUntil = &until
	}
	for _, p := range r.Pieces {
		out.Pieces = append(out.Pieces, apiReservationPiece{OfferID: p.OfferID, Devices: p.Devices, Start: p.Start, End: p.End,
			Interruptible: p.Interruptible, PriceCents: p.PriceCents, AmountCents: p.AmountCents})
	}
	return out
}

func (h *Handler) handleAPIReserve(c echo.Context) error {
	var body apiBooking
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	if len(body.Request) == 0 || body.QuoteID == "" {
		return &market.Error{Code: market.CodeInvalid, Message: "Send the request you quoted and the quote_id to book.",
			Fields: map[string]string{"request": "required", "quote_id": "required"}}
	}
	req, err := market.DecodeRequestJSON(body.Request)
	if err != nil {
		return err
	}
	r, err := h.wf.BookQuote(c.Request().Context(), currentUser(c).ID, req, body.QuoteID, holdDuration)
	if market.ErrorCode(err) == market.CodeConflict {
		// The conflict carries the fresh quotes its message promises.
		fresh, qerr := h.apiQuotes(c, req)
		if qerr != nil {
			return qerr
		}
		return writeJSON(c, http.StatusConflict, apiBookingConflict{
			Error:     apiError{Code: market.CodeConflict, Message: market.ErrorMessage(err), RequestID: c.Response().Header().Get(echo.HeaderXRequestID)},
			apiQuotes: fresh,
		})
	}
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusCreated, toAPIReservation(r))
}

// apiBookingConflict is a 409 answer to a booking: the error, as every API
// error has it, beside fresh quotes for the same request in the shape of
// POST /api/v1/quotes (quotes, total, explanation).
type apiBookingConflict struct {
	Error apiError `json:"error"`
	apiQuotes
}

func (h *Handler) handleAPIReservations(c echo.Context) error {
	list, err := h.db.ListBuyerReservations(c.Request().Context(), currentUser(c).ID)
	if err != nil {
		return err
	}
	out := struct {
		Reservations []apiReservation `json:"reservations"`
	}{Reservations: []apiReservation{}}
	for _, r := range list {
		out.Reservations = append(out.Reservations, toAPIReservation(r))
	}
	return writeJSON(c, http.StatusOK, out)
}

func (h *Handler) handleAPIReservation(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	r, err := h.db.FindBuyerReservation(c.Request().Context(), currentUser(c).ID, id)
	if err != nil {
		return err
	}
	return h.writeAPIReservation(c, r)
}

func (h *Handler) handleAPIReservationCancel(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	r, err := h.cancel(c, id)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, toAPIReservation(r))
}

// Provider endpoints manage one's own offers with the portable offer JSON.

func (h *Handler) handleAPIProviderOffers(c echo.Context) error {
	u := currentUser(c)
	if !u.IsProvider {
		return market.Errorf(market.CodeForbidden, "This account does not list capacity.")
	}
	offers, err := h.db.ListProviderOffers(c.Request().Context(), u.ID)
	if err != nil {
		return err
	}
	out := apiOfferList{Offers: []apiOffer{}, Total: len(offers)}
	for _, o := range offers {
		ao, err := toAPIOffer(o, "")
		if err != nil {
			return err
		}
		out.Offers = append(out.Offers, ao)
	}
	return writeJSON(c, http.StatusOK, out)
}

func (h *Handler) readAPIOffer(c echo.Context) (market.Offer, error) {
	u := currentUser(c)
	if !u.IsProvider {
		return market.Offer{}, market.Errorf(market.CodeForbidden, "This account does not list capacity.")
	}
	data, err := io.ReadAll(io.LimitReader(c.Request().Body, market.MaxJSONBytes+1))
	if err != nil {
		return market.Offer{}, market.Errorf(market.CodeInvalid, "The request body could not be read.")
	}
	o, err := market.DecodeOfferJSON(data, h.now())
	if err != nil {
		return market.Offer{}, err
	}
	o.ProviderID = u.ID
	return o, nil
}

func (h *Handler) handleAPIOfferCreate(c echo.Context) error {
	o, err := h.readAPIOffer(c)
	if err != nil {
		return err
	}
	created, _, err := h.wf.CreateOffer(c.Request().Context(), o)
	if err != nil {
		return err
	}
	ao, err := toAPIOffer(created, "")
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusCreated, ao)
}

func (h *Handler) handleAPIOfferUpdate(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	// Ownership first: another provider's offer is not found.
	if _, err := h.db.FindProviderOffer(c.Request().Context(), currentUser(c).ID, id); err != nil {
		return err
	}
	o, err := h.readAPIOffer(c)
	if err != nil {
		return err
	}
	o.ID = id
	updated, _, err := h.wf.UpdateOffer(c.Request().Context(), currentUser(c).ID, o)
	if err != nil {
		return err
	}
	ao, err := toAPIOffer(updated, "")
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, ao)
}

func (h *Handler) handleAPIOfferState(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	var body struct {
		State string `json:"state"`
	}
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	if err := h.wf.SetOfferState(c.Request().Context(), currentUser(c).ID, id, market.OfferState(body.State)); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// writeJSON encodes v into a buffer first and sends it with its length in
// one write: cheaper than streaming a chunked response for quote-sized
// bodies, and a failed encoding still becomes a clean error.
func writeJSON(c echo.Context, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.JSONBlob(status, b)
}

package web

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// The API routes the command-line client (issue 30) needs beyond the
// first ones: paying with the saved card, extending, resale and the
// provider's hosts. Each is the browser's workflow step behind a bearer
// token; docs/api.md and web/openapi.json describe them.

// handleAPIPaySaved pays a held reservation at once with the buyer's
// default saved card (workflow.PayWithSavedMethod) and answers with the
// reservation and its machines. No saved card, or a declined one, is a
// conflict; paying twice is paid once.
func (h *Handler) handleAPIPaySaved(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	r, err := h.wf.PayWithSavedMethod(c.Request().Context(), currentUser(c).ID, id)
	if err != nil {
		return apiAccountField(err)
	}
	return h.writeAPIReservation(c, r)
}

// apiExtension is the price of extending a reservation by hours, and how
// long it can be extended.
type apiExtension struct {
	ReservationID int64                 `json:"reservation_id"`
	MinHours      int                   `json:"min_hours"`
	MaxHours      int                   `json:"max_hours"`
	Hours         int                   `json:"hours,omitempty"`
	AmountCents   market.Cents          `json:"amount_cents,omitempty"`
	Pieces        []apiReservationPiece `json:"pieces"`
}

func toAPIPieces(ps []market.ReservationPiece) []apiReservationPiece {
	out := []apiReservationPiece{}
	for _, p := range ps {
		out = append(out, apiReservationPiece{OfferID: p.OfferID, Devices: p.Devices, Start: p.Start, End: p.End,
			Interruptible: p.Interruptible, PriceCents: p.PriceCents, AmountCents: p.AmountCents})
	}
	return out
}

// handleAPIExtensionQuote prices extending the buyer's running reservation
// by ?hours= (workflow.QuoteExtension); without hours it only says how
// long it can be extended.
func (h *Handler) handleAPIExtensionQuote(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	hours, err := apiInt("hours", c.QueryParam("hours"), 0, 0, 24*365)
	if err != nil {
		return err
	}
	q, err := h.wf.QuoteExtension(c.Request().Context(), currentUser(c).ID, id, hours)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, apiExtension{ReservationID: id, MinHours: q.Limits.MinHours, MaxHours: q.Limits.MaxHours,
		Hours: q.Extension.Hours, AmountCents: q.Extension.Amount, Pieces: toAPIPieces(q.Extension.Pieces)})
}

// apiExtend is the body of POST /api/v1/reservations/:id/extend: the
// hours and the amount the client was quoted for them.
type apiExtend struct {
	Hours       int          `json:"hours"`
	AmountCents market.Cents `json:"amount_cents"`
}

// handleAPIExtend books the extension as a new held reservation
// (workflow.Extend), to be paid like any booking. A price other than
// amount_cents is a conflict: quote again.
func (h *Handler) handleAPIExtend(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	var body apiExtend
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	if body.AmountCents <= 0 {
		return &market.Error{Code: market.CodeInvalid, Message: "Send the amount_cents you were quoted (GET …/extension?hours=N).",
			Fields: map[string]string{"amount_cents": "required: the quoted amount"}}
	}
	r, err := h.wf.Extend(c.Request().Context(), currentUser(c).ID, id, body.Hours, body.AmountCents, holdDuration)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusCreated, toAPIReservation(r))
}

// apiResale is one resale listing: the remaining time of a reservation
// from From to End, sold whole for PriceCents.
type apiResale struct {
	ID            int64                 `json:"id"`
	ReservationID int64                 `json:"reservation_id,omitempty"`
	State         string                `json:"state"`
	From          time.Time             `json:"from"`
	End           time.Time             `json:"end"`
	Devices       int                   `json:"devices"`
	PriceCents    market.Cents          `json:"price_cents"`
	Pieces        []apiReservationPiece `json:"pieces"`
}

func toAPIResale(ro store.ResaleOffer, own bool) apiResale {
	l, r := ro.Listing, ro.Reservation
	out := apiResale{ID: l.ID, State: string(l.State), From: l.From, End: r.End(), Devices: r.Devices(), PriceCents: l.Price,
		Pieces: toAPIPieces(market.ResalePieces(r, l.From))}
	if own {
		out.ReservationID = l.ReservationID
	}
	return out
}

// handleAPIResaleList lists the open resale listings.
func (h *Handler) handleAPIResaleList(c echo.Context) error {
	ros, err := h.db.ListOpenResaleOffers(c.Request().Context(), h.now())
	if err != nil {
		return err
	}
	u := currentUser(c)
	out := struct {
		Listings []apiResale `json:"listings"`
	}{Listings: []apiResale{}}
	for _, ro := range ros {
		out.Listings = append(out.Listings, toAPIResale(ro, ro.Listing.SellerID == u.ID))
	}
	return writeJSON(c, http.StatusOK, out)
}

// apiResaleCreate is the body of POST /api/v1/reservations/:id/resale.
type apiResaleCreate struct {
	From       time.Time    `json:"from"`
	PriceCents market.Cents `json:"price_cents"`
}

// handleAPIResaleCreate lists the remaining time of the buyer's
// reservation from a whole hour at a price (workflow.ListRemainingTime).
func (h *Handler) handleAPIResaleCreate(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	var body apiResaleCreate
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	fields := map[string]string{}
	if body.From.IsZero() {
		fields["from"] = "required: the whole hour to sell from (RFC 3339)"
	}
	if body.PriceCents <= 0 {
		fields["price_cents"] = "required: the price of all of it in cents"
	}
	if len(fields) > 0 {
		return &market.Error{Code: market.CodeInvalid, Message: "Say from when and for how much.", Fields: fields}
	}
	l, err := h.wf.ListRemainingTime(c.Request().Context(), currentUser(c).ID, id, body.From.UTC(), body.PriceCents)
	if err != nil {
		return err
	}
	return h.writeAPIResale(c, http.StatusCreated, l.ID)
}

// handleAPIResaleWithdraw withdraws the seller's open listing.
func (h *Handler) handleAPIResaleWithdraw(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	l, err := h.wf.WithdrawResale(c.Request().Context(), currentUser(c).ID, id)
	if err != nil {
		return err
	}
	return h.writeAPIResale(c, http.StatusOK, l.ID)
}

// handleAPIResaleBuy buys a listing with the buyer's default saved card
// (workflow.BuyResale) and answers with the new reservation.
func (h *Handler) handleAPIResaleBuy(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	r, err := h.wf.BuyResale(c.Request().Context(), currentUser(c).ID, id)
	if err != nil {
		return apiAccountField(err)
	}
	return writeJSON(c, http.StatusCreated, toAPIReservation(r))
}

func (h *Handler) writeAPIResale(c echo.Context, status int, id int64) error {
	ro, err := h.db.FindResaleOffer(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(c, status, toAPIResale(ro, ro.Listing.SellerID == currentUser(c).ID))
}

// apiHostOffer is one of the provider's offers with its nodes' agents.
type apiHostOffer struct {
	OfferID int64         `json:"offer_id"`
	Title   string        `json:"title"`
	State   string        `json:"state"`
	Nodes   []apiHostNode `json:"nodes"`
}

type apiHostNode struct {
	Node            int        `json:"node"`
	TokenPrefix     string     `json:"token_prefix,omitempty"`
	TokenLastUsedAt *time.Time `json:"token_last_used_at,omitempty"`
	Online          bool       `json:"online"`
	LastHeartbeat   *time.Time `json:"last_heartbeat,omitempty"`
	AgentVersion    string     `json:"agent_version,omitempty"`
	Devices         int        `json:"devices"`
	HealthyDevices  int        `json:"healthy_devices"`
	HardwareDiffers string     `json:"hardware_differs,omitempty"`
	Rentals         int        `json:"rentals"`
}

func requireAPIProvider(c echo.Context) error {
	if !currentUser(c).IsProvider {
		return market.Errorf(market.CodeForbidden, "This account does not list capacity.")
	}
	return nil
}

// handleAPIHosts shows the provider's nodes: their tokens and what their
// agents last reported.
func (h *Handler) handleAPIHosts(c echo.Context) error {
	if err := requireAPIProvider(c); err != nil {
		return err
	}
	now := h.now()
	offers, err := h.db.ListProviderHosts(c.Request().Context(), currentUser(c).ID, now)
	if err != nil {
		return err
	}
	out := struct {
		Offers []apiHostOffer `json:"offers"`
	}{Offers: []apiHostOffer{}}
	for _, ho := range offers {
		o := apiHostOffer{OfferID: ho.Offer.ID, Title: ho.Offer.Title, State: string(ho.Offer.State), Nodes: []apiHostNode{}}
		for _, n := range ho.Nodes {
			an := apiHostNode{Node: n.Node, Rentals: len(n.Rentals)}
			if n.Token.ID != 0 {
				an.TokenPrefix = n.Token.Prefix
				if !n.Token.LastUsedAt.IsZero() {
					t := n.Token.LastUsedAt
					an.TokenLastUsedAt = &t
				}
			}
			if n.Reported {
				t := n.Status.LastHeartbeatAt
				an.Online, an.LastHeartbeat, an.AgentVersion = n.Status.Online(now), &t, n.Status.AgentVersion
				an.Devices, an.HealthyDevices, an.HardwareDiffers = len(n.Status.Devices), n.Status.Healthy, n.Status.HardwareDiffers
			}
			o.Nodes = append(o.Nodes, an)
		}
		out.Offers = append(out.Offers, o)
	}
	return writeJSON(c, http.StatusOK, out)
}

// apiHostTokenCreate is the body of POST /api/v1/provider/hosts/tokens.
type apiHostTokenCreate struct {
	OfferID int64 `json:"offer_id"`
	Node    *int  `json:"node"`
}

type apiHostToken struct {
	ID      int64  `json:"id"`
	OfferID int64  `json:"offer_id"`
	Node    int    `json:"node"`
	Prefix  string `json:"prefix"`
	Token   string `json:"token"`
}

// handleAPIHostTokenCreate issues a node's host token
// (workflow.CreateHostToken), revoking its previous one; the raw token is
// in this answer only.
func (h *Handler) handleAPIHostTokenCreate(c echo.Context) error {
	if err := requireAPIProvider(c); err != nil {
		return err
	}
	var body apiHostTokenCreate
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	fields := map[string]string{}
	if body.OfferID <= 0 {
		fields["offer_id"] = "required: the offer's id"
	}
	if body.Node == nil {
		fields["node"] = "required: the node's number, counted from 0"
	}
	if len(fields) > 0 {
		return &market.Error{Code: market.CodeInvalid, Message: "Say which offer and node.", Fields: fields}
	}
	tok, raw, err := h.wf.CreateHostToken(c.Request().Context(), currentUser(c).ID, body.OfferID, *body.Node)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusCreated, apiHostToken{ID: tok.ID, OfferID: tok.OfferID, Node: tok.Node, Prefix: tok.Prefix, Token: raw})
}

// apiAccountField names the field of an invalid refusal that names none:
// on the routes that charge the saved card, the refusal is about the
// account's payment method (workflow's "Add a payment method…"), so the
// API says payment_method, as every 400 names a field (web/openapi.json).
func apiAccountField(err error) error {
	if market.ErrorCode(err) != market.CodeInvalid || len(market.FieldErrors(err)) > 0 {
		return err
	}
	msg := market.ErrorMessage(err)
	return &market.Error{Code: market.CodeInvalid, Message: msg, Fields: map[string]string{"payment_method": msg}}
}

package web

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// The spot market through the JSON API: a programmatic buyer places,
// lists and cancels their own bids (the same rules as the offer page's
// form: market.ValidateSpotBid, a saved payment method).

// apiSpotBidBody is POST /api/v1/spot/bids. The hours are whole UTC hours;
// last_hour is the start of the last hour bid for. A maximum above the
// offer's on-demand price needs confirm_above_on_demand: true (and is at
// most market.SpotBidMaxMultiple times it).
type apiSpotBidBody struct {
	OfferID              int64     `json:"offer_id"`
	Devices              int       `json:"devices"`
	MaxCents             int64     `json:"max_cents_per_device_hour"`
	FirstHour            time.Time `json:"first_hour"`
	LastHour             time.Time `json:"last_hour"`
	ConfirmAboveOnDemand bool      `json:"confirm_above_on_demand"`
}

// apiSpotBidFields names the bid's fields as the API body does, for the
// market's field errors (its names are the form's).
var apiSpotBidFields = map[string]string{"offer": "offer_id", "max_price": "max_cents_per_device_hour"}

// apiSpotBidError renames the field errors of err to the body's fields.
func apiSpotBidError(err error) error {
	fields := market.FieldErrors(err)
	if len(fields) == 0 {
		return apiAccountField(err)
	}
	named := map[string]string{}
	for k, msg := range fields {
		if n, ok := apiSpotBidFields[k]; ok {
			k = n
		}
		named[k] = msg
	}
	return &market.Error{Code: market.ErrorCode(err), Message: market.ErrorMessage(err), Fields: named}
}

type apiSpotHour struct {
	Hour          time.Time `json:"hour"`
	Devices       int       `json:"devices"`
	PriceCents    int64     `json:"price_cents_per_device_hour"`
	ReservationID int64     `json:"reservation_id"`
	State         string    `json:"reservation_state"`
	Preempted     bool      `json:"preempted"`
}

type apiSpotBid struct {
	ID        int64         `json:"id"`
	OfferID   int64         `json:"offer_id"`
	State     string        `json:"state"` // live, cancelled, finished
	Devices   int           `json:"devices"`
	MaxCents  int64         `json:"max_cents_per_device_hour"`
	FirstHour time.Time     `json:"first_hour"`
	LastHour  time.Time     `json:"last_hour"`
	PlacedAt  time.Time     `json:"placed_at"`
	EndNote   string        `json:"end_note,omitempty"`
	HoursWon  []apiSpotHour `json:"hours_won"`
}

func toAPISpotBid(r store.SpotBidRecord) apiSpotBid {
	b := r.Bid
	out := apiSpotBid{ID: b.ID, OfferID: b.OfferID, State: string(b.State), Devices: b.Devices, MaxCents: int64(b.MaxCents),
		FirstHour: b.FirstHour, LastHour: b.LastHour, PlacedAt: b.PlacedAt, EndNote: b.EndNote, HoursWon: []apiSpotHour{}}
	for _, h := range r.Hours {
		out.HoursWon = append(out.HoursWon, apiSpotHour{Hour: h.Hour, Devices: h.Devices, PriceCents: int64(h.PriceCents),
			ReservationID: h.ReservationID, State: string(h.State), Preempted: h.Preempted})
	}
	return out
}

// apiSpotBid finds one of the buyer's bids as the API shows it.
func (h *Handler) apiSpotBid(c echo.Context, buyerID, bidID int64) (apiSpotBid, error) {
	list, err := h.db.ListBuyerSpotBids(c.Request().Context(), buyerID)
	if err != nil {
		return apiSpotBid{}, err
	}
	for _, r := range list {
		if r.Bid.ID == bidID {
			return toAPISpotBid(r), nil
		}
	}
	return apiSpotBid{}, market.Errorf(market.CodeNotFound, "Spot bid %d was not found.", bidID)
}

func (h *Handler) handleAPISpotBidCreate(c echo.Context) error {
	var body apiSpotBidBody
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	u := currentUser(c)
	b, err := h.wf.PlaceSpotBid(c.Request().Context(), market.SpotBid{BuyerID: u.ID, OfferID: body.OfferID, Devices: body.Devices,
		MaxCents: market.Cents(body.MaxCents), FirstHour: body.FirstHour.UTC(), LastHour: body.LastHour.UTC(),
		ConfirmAboveOnDemand: body.ConfirmAboveOnDemand})
	if err != nil {
		return apiSpotBidError(err)
	}
	out, err := h.apiSpotBid(c, u.ID, b.ID)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusCreated, out)
}

func (h *Handler) handleAPISpotBids(c echo.Context) error {
	list, err := h.db.ListBuyerSpotBids(c.Request().Context(), currentUser(c).ID)
	if err != nil {
		return err
	}
	out := struct {
		Bids []apiSpotBid `json:"bids"`
	}{Bids: []apiSpotBid{}}
	for _, r := range list {
		out.Bids = append(out.Bids, toAPISpotBid(r))
	}
	return writeJSON(c, http.StatusOK, out)
}

func (h *Handler) handleAPISpotBidCancel(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	u := currentUser(c)
	if _, err := h.wf.CancelSpotBid(c.Request().Context(), u.ID, id); err != nil {
		return err
	}
	out, err := h.apiSpotBid(c, u.ID, id)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, out)
}

// apiSpotIndicative is GET /api/v1/offers/:id/spot/indicative: the next
// hour's indicative clearing (store.SpotIndicative).
type apiSpotIndicative struct {
	OfferID     int64     `json:"offer_id"`
	Hour        time.Time `json:"hour"`
	PriceCents  int64     `json:"price_cents"`
	FloorCents  int64     `json:"floor_cents"`
	Capacity    int       `json:"capacity"`
	DevicesBid  int       `json:"devices_bid"`
	DevicesSold int       `json:"devices_sold"`
	Note        string    `json:"note"`
}

// spotIndicativeNote is what the indicative price assumes.
const spotIndicativeNote = "Indicative: changes as bids arrive, until the hour is auctioned. It assumes every live bid's card hold succeeds; a bid whose hold fails sits the hour out."

func (h *Handler) handleAPISpotIndicative(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	l, err := h.db.FindOfferByID(ctx, id)
	if err != nil {
		return err
	}
	if o := l.Offer; !o.Listed() || l.ProviderSuspended || !o.Interruptible || o.InterruptibleCentsPerDH < 1 {
		return market.Errorf(market.CodeNotFound, "Offer %d sells no spot capacity.", id)
	}
	ind, err := h.db.SpotIndicative(ctx, id, h.now())
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, apiSpotIndicative{OfferID: id, Hour: ind.Hour, PriceCents: int64(ind.PriceCents), FloorCents: int64(ind.FloorCents),
		Capacity: ind.Capacity, DevicesBid: ind.DevicesBid, DevicesSold: ind.DevicesSold, Note: spotIndicativeNote})
}

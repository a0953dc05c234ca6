package web

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
)

const (
	newHostTokenCookie = "gm_new_host_token" // encrypted; see setNewHostToken
	hostsPath          = "/provider/hosts"
	// allNodesShown: offers with at most this many nodes show every node;
	// larger ones show the nodes with an agent or a rental.
	allNodesShown = 16
)

func (h *Handler) handleProviderHosts(c echo.Context) error {
	v, err := h.hostsView(c, 0, "", "")
	if err != nil {
		return err
	}
	// A token just created is shown on this page once; it is stored hashed.
	if v.NewToken, v.NewTokenFor = h.takeNewHostToken(c); v.NewToken != "" {
		c.Response().Header().Set("Cache-Control", "no-store")
	}
	return render(c, http.StatusOK, views.ProviderHosts(h.page(c, "Hosts"), v))
}

// hostsView builds the hosts page of the signed-in provider; errOffer,
// nodeValue and nodeError put a node number and its problem back on that
// offer's form.
func (h *Handler) hostsView(c echo.Context, errOffer int64, nodeValue, nodeError string) (views.ProviderHostsView, error) {
	now := h.now()
	offers, err := h.db.ListProviderHosts(c.Request().Context(), currentUser(c).ID, now)
	if err != nil {
		return views.ProviderHostsView{}, err
	}
	v := views.ProviderHostsView{Interval: durationWords(market.HeartbeatInterval),
		Grace: durationWords(market.HeartbeatGrace(market.HeartbeatInterval))}
	for _, ho := range offers {
		v.Offers = append(v.Offers, hostOfferView(ho, now, errOffer, nodeValue, nodeError))
	}
	return v, nil
}

func hostOfferView(ho store.HostOffer, now time.Time, errOffer int64, nodeValue, nodeError string) views.HostOfferView {
	o := ho.Offer
	id := strconv.FormatInt(o.ID, 10)
	v := views.HostOfferView{ID: id, Title: o.Title, URL: "/offers/" + id, CreateAction: hostsPath + "/tokens",
		Summary: fmt.Sprintf("%d × %s per node, %d node(s)", o.DevicesPerNode, o.Accelerator().Name, o.Nodes),
		NodeMax: strconv.Itoa(o.Nodes - 1)}
	if o.ID == errOffer {
		v.NodeValue, v.NodeError = nodeValue, nodeError
	}
	known := map[int]store.HostNode{}
	for _, n := range ho.Nodes {
		known[n.Node] = n
	}
	if o.Nodes <= allNodesShown {
		for i := range o.Nodes {
			n, ok := known[i]
			if !ok {
				n = store.HostNode{Node: i}
			}
			v.Nodes = append(v.Nodes, hostNodeView(n, now))
		}
		return v
	}
	for _, n := range ho.Nodes {
		v.Nodes = append(v.Nodes, hostNodeView(n, now))
	}
	if hidden := o.Nodes - len(ho.Nodes); hidden > 0 {
		v.Hidden = fmt.Sprintf("%d more node(s) have no agent and no rental; create a token for one by its number below.", hidden)
	}
	return v
}

func hostNodeView(n store.HostNode, now time.Time) views.HostNodeView {
	v := views.HostNodeView{Node: strconv.Itoa(n.Node), Status: "no agent yet", StatusBadge: "paused"}
	if n.Token.ID != 0 {
		v.TokenPrefix, v.TokenCreated, v.TokenLastUsed = n.Token.Prefix, formatTime(n.Token.CreatedAt), "never"
		if !n.Token.LastUsedAt.IsZero() {
			v.TokenLastUsed = formatTime(n.Token.LastUsedAt)
		}
		v.RevokeURL = fmt.Sprintf("%s/tokens/%d/revoke", hostsPath, n.Token.ID)
	}
	if n.Reported {
		s := n.Status
		v.Status, v.StatusBadge = "offline", "rejected"
		if s.Online(now) {
			v.Status, v.StatusBadge = "online", "active"
		}
		v.LastHeartbeat = formatTime(s.LastHeartbeatAt)
		v.Agent = fmt.Sprintf("agent %s, probe %s, renters: %s", orDash(s.AgentVersion), orDash(s.Probe), s.Isolation.Label())
		v.Health = fmt.Sprintf("%d of %d devices healthy", s.Healthy, len(s.Devices))
		v.ProbeError, v.Differs = s.ProbeError, s.HardwareDiffers
		for _, d := range s.Devices {
			v.Devices = append(v.Devices, hostDeviceView(d))
		}
	}
	for _, r := range n.Rentals {
		v.Rentals = append(v.Rentals, hostRentalView(r, now))
	}
	return v
}

func hostDeviceView(d market.HostDevice) views.HostDeviceView {
	return views.HostDeviceView{Index: strconv.Itoa(d.Index), Name: orDash(d.Name), Memory: market.FormatInt(d.MemoryMiB) + " MiB",
		Temp: strconv.Itoa(d.TemperatureC) + " °C", Util: strconv.Itoa(d.UtilizationPct) + "% busy",
		Power: strconv.FormatFloat(d.PowerW, 'f', 0, 64) + " W", ECC: market.FormatInt(d.ECCUncorrected) + " uncorrected ECC errors",
		Healthy: d.Healthy}
}

func hostRentalView(r store.HostRental, now time.Time) views.HostRentalView {
	v := views.HostRentalView{Reservation: "#" + strconv.FormatInt(r.ReservationID, 10), URL: fmt.Sprintf("/provider/bookings/%d", r.ReservationID),
		Buyer: r.BuyerName, Devices: strconv.Itoa(r.Devices), Window: formatSpan(r.Piece.Start, r.Piece.End), When: "now"}
	switch {
	case now.Before(r.Piece.Start):
		v.When = "next"
	case !now.Before(r.Piece.End):
		v.When = "ended"
	}
	v.Access, v.Overdue = accessText(r, now)
	return v
}

// accessText says, for the provider, where the buyer's keys stand on the
// node (never the keys or the connection: those are the buyer's), and
// whether their removal is overdue.
func accessText(r store.HostRental, now time.Time) (string, bool) {
	a := r.Access
	state := market.AccessStateOf(r.State, r.Piece, a.Installed(), a.Removed(), now)
	switch {
	case market.RemovalOverdue(r.State, r.Piece, a.Installed(), a.Removed(), r.UpdatedAt, now):
		return fmt.Sprintf("The buyer's keys, installed %s, are not confirmed removed %s after the end: check the agent.",
			formatTime(a.InstalledAt), durationWords(market.RemovalDeadline)), true
	case a.Removed():
		return "The buyer's keys were installed " + formatTime(a.InstalledAt) + " and removed " + formatTime(a.RemovedAt) + ".", false
	case state == market.AccessRemove:
		return "The rental is over: the agent is asked to remove the buyer's keys (installed " + formatTime(a.InstalledAt) + ").", false
	case a.Installed():
		return "The buyer's keys are installed (since " + formatTime(a.InstalledAt) + ").", false
	case state == market.AccessInstall:
		return "Waiting for the agent to install the buyer's keys.", false
	case now.Before(r.Piece.Start):
		return "The agent installs the buyer's keys at the start.", false
	}
	return "", false
}

// durationWords writes a protocol duration for people: "10 seconds",
// "1 minute".
func durationWords(d time.Duration) string {
	if d%time.Minute == 0 {
		if d == time.Minute {
			return "1 minute"
		}
		return fmt.Sprintf("%d minutes", d/time.Minute)
	}
	return fmt.Sprintf("%d seconds", d/time.Second)
}

func (h *Handler) handleHostTokenCreate(c echo.Context) error {
	offerID, _ := strconv.ParseInt(c.FormValue("offer_id"), 10, 64)
	nodeValue := strings.TrimSpace(c.FormValue("node"))
	invalid := func(msg string) error {
		v, err := h.hostsView(c, offerID, nodeValue, msg)
		if err != nil {
			return err
		}
		return render(c, http.StatusUnprocessableEntity, views.ProviderHosts(h.page(c, "Hosts"), v))
	}
	node, err := strconv.Atoi(nodeValue)
	if err != nil {
		return invalid("Enter the node's number, counted from 0.")
	}
	ctx := c.Request().Context()
	tok, raw, err := h.wf.CreateHostToken(ctx, currentUser(c).ID, offerID, node)
	if msg := market.FieldErrors(err)["node"]; msg != "" {
		return invalid(msg)
	}
	if err != nil {
		return err
	}
	o, err := h.db.FindProviderOffer(ctx, currentUser(c).ID, offerID)
	if err != nil {
		return err
	}
	// Post/redirect/get: a refresh of the page that shows the token must
	// not create another (which would revoke this one).
	if err := h.setNewHostToken(c, raw, fmt.Sprintf("node %d of “%s”", tok.Node, o.Title)); err != nil {
		return err
	}
	h.setFlash(c, "ok", fmt.Sprintf("Host token created for node %d; copy it now: it is shown only once.", tok.Node))
	return c.Redirect(http.StatusSeeOther, hostsPath)
}

func (h *Handler) handleHostTokenRevoke(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	if err := h.wf.RevokeHostToken(c.Request().Context(), currentUser(c).ID, id); err != nil {
		return err
	}
	h.setFlash(c, "ok", "Host token revoked; the agent using it is refused from now on.")
	return c.Redirect(http.StatusSeeOther, hostsPath)
}

// setNewHostToken keeps a just-created host token for the hosts page that
// the creation redirects to, in the encrypted cookie store of new API
// tokens, scoped to the hosts page; takeNewHostToken shows it once.
func (h *Handler) setNewHostToken(c echo.Context, raw, label string) error {
	sess, _ := h.secrets.Get(c.Request(), newHostTokenCookie)
	sess.Options.Path = hostsPath
	sess.Values = map[any]any{"token": raw, "for": label}
	return sess.Save(c.Request(), c.Response())
}

// takeNewHostToken returns and forgets the token setNewHostToken kept.
func (h *Handler) takeNewHostToken(c echo.Context) (raw, label string) {
	sess, err := h.secrets.Get(c.Request(), newHostTokenCookie)
	if err != nil || sess.IsNew {
		return "", ""
	}
	raw, _ = sess.Values["token"].(string)
	label, _ = sess.Values["for"].(string)
	sess.Options.Path, sess.Options.MaxAge = hostsPath, -1
	if err := sess.Save(c.Request(), c.Response()); err != nil {
		logger(c).Warn("new host token cookie not cleared", "err", err)
	}
	return raw, label
}

func adminHostRow(f store.HostFlag, when string) views.AdminHostRow {
	return views.AdminHostRow{Offer: f.OfferTitle, OfferURL: fmt.Sprintf("/offers/%d", f.OfferID), Provider: f.ProviderName,
		Node: strconv.Itoa(f.Node), Message: f.Message, When: when}
}

func (h *Handler) handleAdminHosts(c echo.Context) error {
	differs, err := h.db.ListHardwareDiffers(c.Request().Context())
	if err != nil {
		return err
	}
	overdue, err := h.db.ListOverdueRemovals(c.Request().Context(), h.now())
	if err != nil {
		return err
	}
	removeFailed, err := h.db.ListContainerRemovalFailures(c.Request().Context())
	if err != nil {
		return err
	}
	accessFailed, err := h.db.ListAccessRemovalFailures(c.Request().Context())
	if err != nil {
		return err
	}
	removeFailed = append(accessFailed, removeFailed...)
	v := views.AdminHostsView{}
	for _, f := range removeFailed {
		v.RemoveFailed = append(v.RemoveFailed, adminHostRow(f, formatTime(f.At)))
	}
	for _, f := range differs {
		v.Differs = append(v.Differs, adminHostRow(f, formatTime(f.At)))
	}
	for _, f := range overdue {
		v.Overdue = append(v.Overdue, adminHostRow(f, formatTime(f.At)))
	}
	return render(c, http.StatusOK, views.AdminHosts(h.page(c, "Hosts"), v))
}

// agentFiguresView lists an offer's figures measured by its agents, beside
// the offer's own.
func (h *Handler) agentFiguresView(ctx context.Context, o market.Offer) (views.AgentFiguresView, error) {
	figs, err := h.db.OfferAgentFigures(ctx, o.ID)
	if err != nil {
		return views.AgentFiguresView{}, err
	}
	var v views.AgentFiguresView
	for _, f := range figs {
		row := views.AgentFigureRow{Name: market.FigureKindLabel(f.Metric), Value: market.MilliFigure(f.Metric, f.MedianMilli), Stated: "—",
			Detail: fmt.Sprintf("median of %d device(s) in %d acceptance test(s), the last %s", f.Devices, f.Tests, formatTime(f.Last))}
		if stated, ok := o.Figure(f.Metric); ok {
			row.Stated = market.FormatFigure(f.Metric, stated.Value) + ", " + string(stated.Basis)
		}
		v.Rows = append(v.Rows, row)
	}
	n, err := h.db.CountOfferContradictions(ctx, o.ID, h.now().AddDate(0, 0, -market.ObservationWindowDays))
	if err != nil {
		return views.AgentFiguresView{}, err
	}
	v.Contradictions = market.ContradictionsText(n)
	return v, nil
}

package web

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
)

// The buyer's access to the machines of a reservation: what the providers'
// agents reported, for the reservation page and the API, to the buyer only.

// Where a buyer's access to a node stands, as the API writes it.
const (
	accessScheduled  = "scheduled"  // the rental has not started
	accessInstalling = "installing" // it runs; the agent has not reported the keys in place
	accessReady      = "ready"      // the keys are in place: connect
	accessRemoving   = "removing"   // it is over; the agent has not confirmed the keys gone
	accessRemoved    = "removed"    // it is over and the keys are gone
	accessEnded      = "ended"      // it is over; the keys were never reported in place
)

// paidStates are the reservation states with machines to reach or reached.
func paidState(s market.ReservationState) bool {
	switch s {
	case market.ReservationConfirmed, market.ReservationActive, market.ReservationCompleted, market.ReservationSettled:
		return true
	}
	return false
}

// accessState is where the buyer's access to a node stands at now, as a
// code and in words.
func accessState(r market.Reservation, p market.ReservationPiece, na store.NodeAccess, now time.Time) (string, string) {
	a := na.Access
	running := market.AccessStateOf(r.State, p, a.Installed(), a.Removed(), now) == market.AccessInstall
	switch {
	case running && a.Installed() && !a.Removed():
		return accessReady, "Ready: your keys are installed (since " + formatTime(a.InstalledAt) + ")."
	case running && na.Reported:
		return accessInstalling, "The provider's agent is installing your keys; the connection appears here within a minute."
	case running:
		return accessInstalling, "No agent reports from this machine yet; if the connection does not appear soon, write to the provider in the messages below."
	case now.Before(p.Start):
		return accessScheduled, "Your keys are installed at the start, " + formatTime(p.Start) + "."
	case a.Removed():
		return accessRemoved, "The rental is over; your keys were removed " + formatTime(a.RemovedAt) + "."
	case a.Installed():
		return accessRemoving, "The rental is over; the provider's agent is removing your keys."
	}
	return accessEnded, "The rental is over."
}

// machineStatus says how a node is doing, from its agent's heartbeats.
func machineStatus(na store.NodeAccess, now time.Time) (string, string) {
	if !na.Reported {
		return "no agent reporting", "paused"
	}
	h := na.Host
	health := strconv.Itoa(h.Healthy) + " of " + strconv.Itoa(len(h.Devices)) + " devices healthy"
	if h.Online(now) {
		return "online, " + health + ", last heartbeat " + formatTime(h.LastHeartbeatAt), "active"
	}
	return "offline since " + formatTime(h.LastHeartbeatAt), "rejected"
}

// reservationAccessView builds the reservation page's machines and access
// for its buyer (the page's handler has checked the reservation is theirs).
func (h *Handler) reservationAccessView(c echo.Context, r market.Reservation, now time.Time) (views.ReservationAccessView, error) {
	v := views.ReservationAccessView{Show: paidState(r.State)}
	if !v.Show {
		return v, nil
	}
	ctx := c.Request().Context()
	nodes, keys, err := h.reservationAccess(ctx, currentUser(c).ID, r)
	if err != nil {
		return v, err
	}
	v.NoKeys = len(keys) == 0 && now.Before(r.End())
	containers, err := h.runtimeAccess(ctx, currentUser(c).ID, r, &v)
	if err != nil {
		return v, err
	}
	for _, na := range nodes {
		p := pieceOf(r, na.PieceID)
		_, state := accessState(r, p, na, now)
		machine, tag := machineStatus(na, now)
		row := views.AccessRow{Piece: strconv.FormatInt(na.PieceID, 10), Node: strconv.Itoa(na.Node), Devices: strconv.Itoa(na.Devices),
			Machine: machine, MachineTag: tag, State: state}
		if code, _ := accessState(r, p, na, now); code == accessReady {
			conn := na.Access.Connection
			row.Command, row.Host, row.Port, row.User = conn.SSHCommand(), conn.Host, strconv.Itoa(conn.Port), conn.User
		}
		containerRow(&row, containers[[2]int64{na.PieceID, int64(na.Node)}])
		v.Rows = append(v.Rows, row)
	}
	return v, nil
}

// reservationAccess reads the nodes of a buyer's reservation and the
// buyer's keys.
func (h *Handler) reservationAccess(ctx context.Context, buyerID int64, r market.Reservation) ([]store.NodeAccess, []market.SSHKey, error) {
	nodes, err := h.db.ListReservationAccess(ctx, buyerID, r.ID)
	if err != nil {
		return nil, nil, err
	}
	keys, err := h.db.ListSSHKeys(ctx, buyerID)
	return nodes, keys, err
}

func pieceOf(r market.Reservation, id int64) market.ReservationPiece {
	for _, p := range r.Pieces {
		if p.ID == id {
			return p
		}
	}
	return market.ReservationPiece{}
}

// apiAccess is one node of a reservation in the API: its status and, once
// the keys are in place, how to connect.
type apiAccess struct {
	PieceID        int64      `json:"piece_id"`
	Node           int        `json:"node"`
	Devices        int        `json:"devices"`
	State          string     `json:"state"`
	Host           string     `json:"host,omitempty"`
	Port           int        `json:"port,omitempty"`
	User           string     `json:"user,omitempty"`
	SSHCommand     string     `json:"ssh_command,omitempty"`
	Online         bool       `json:"online"`
	LastHeartbeat  *time.Time `json:"last_heartbeat,omitempty"`
	HealthyDevices *int       `json:"healthy_devices,omitempty"`
}

// apiReservationDetail is one reservation in the API with its machines.
type apiReservationDetail struct {
	apiReservation
	Access []apiAccess `json:"access"`
}

func (h *Handler) apiReservationDetail(ctx context.Context, buyerID int64, r market.Reservation, now time.Time) (apiReservationDetail, error) {
	out := apiReservationDetail{apiReservation: toAPIReservation(r), Access: []apiAccess{}}
	if !paidState(r.State) {
		return out, nil
	}
	nodes, _, err := h.reservationAccess(ctx, buyerID, r)
	if err != nil {
		return out, err
	}
	for _, na := range nodes {
		state, _ := accessState(r, pieceOf(r, na.PieceID), na, now)
		a := apiAccess{PieceID: na.PieceID, Node: na.Node, Devices: na.Devices, State: state}
		if state == accessReady {
			conn := na.Access.Connection
			a.Host, a.Port, a.User, a.SSHCommand = conn.Host, conn.Port, conn.User, conn.SSHCommand()
		}
		if na.Reported {
			last, healthy := na.Host.LastHeartbeatAt, na.Host.Healthy
			a.Online, a.LastHeartbeat, a.HealthyDevices = na.Host.Online(now), &last, &healthy
		}
		out.Access = append(out.Access, a)
	}
	return out, nil
}

// writeAPIReservation answers with a reservation and its machines.
func (h *Handler) writeAPIReservation(c echo.Context, r market.Reservation) error {
	out, err := h.apiReservationDetail(c.Request().Context(), currentUser(c).ID, r, h.now())
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, out)
}

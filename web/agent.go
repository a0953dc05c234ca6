package web

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"golang.org/x/time/rate"

	"github.com/gpumarket/gpumarket/agentapi"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/workflow"
)

// The provider agent's API (docs/agent.md): JSON under /agent/v1, a host
// token per node of an offer, outside CSRF and sessions. The messages are
// agentapi's, shared with the agent.

const (
	ctxHostToken   = "host_token"
	agentBodyLimit = "64K"
	// agentRatePerSecond is each host token's steady request rate (burst
	// four times that): a heartbeat every few seconds and a report now and
	// then, with room for an agent catching up after a restart.
	agentRatePerSecond = 2
)

// agentAuth authenticates a host token from the Authorization header
// ("Bearer gph_…"), from memory once it was read (workflow.AuthenticateHost):
// a revocation or the provider's suspension is heard on the change feed and
// takes effect at once.
func (h *Handler) agentAuth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		raw, ok := strings.CutPrefix(c.Request().Header.Get(echo.HeaderAuthorization), "Bearer ")
		if !ok || strings.TrimSpace(raw) == "" {
			return market.Errorf(market.CodeUnauthorized, "Send the host token as \"Authorization: Bearer gph_…\"; create one on the provider's hosts page.")
		}
		tok, err := h.wf.AuthenticateHost(c.Request().Context(), strings.TrimSpace(raw))
		if err != nil {
			return err
		}
		c.Set(ctxHostToken, tok)
		return next(c)
	}
}

// hostToken returns the request's authenticated host token.
func hostToken(c echo.Context) store.HostToken {
	t, _ := c.Get(ctxHostToken).(store.HostToken)
	return t
}

// agentRateLimit limits each host token (see apiRateLimit for why per
// process is enough).
func (h *Handler) agentRateLimit() echo.MiddlewareFunc {
	return middleware.RateLimiterWithConfig(middleware.RateLimiterConfig{
		Store: middleware.NewRateLimiterMemoryStoreWithConfig(middleware.RateLimiterMemoryStoreConfig{
			Rate: rate.Limit(agentRatePerSecond), Burst: 4 * agentRatePerSecond, ExpiresIn: 10 * time.Minute,
		}),
		IdentifierExtractor: func(c echo.Context) (string, error) {
			return "host:" + strconv.FormatInt(hostToken(c).ID, 10), nil
		},
		DenyHandler: func(c echo.Context, id string, err error) error {
			return market.Errorf(market.CodeRateLimited, "Too many requests for this host token; slow down.")
		},
	})
}

// handleAgentHeartbeat records a heartbeat of the token's node and answers
// with the assignments of that node and their version, for the long-poll.
// A replayed or reordered heartbeat is answered 200 with accepted false and
// changes nothing.
func (h *Handler) handleAgentHeartbeat(c echo.Context) error {
	var in agentapi.Heartbeat
	if err := decodeBody(c, &in); err != nil {
		return err
	}
	hb := market.Heartbeat{Seq: in.Seq, SentAt: in.SentAt, AgentVersion: in.AgentVersion, Probe: in.Probe, Devices: in.Devices, Error: in.Error,
		Isolation: market.Isolation(in.Isolation)}
	if err := market.ValidateHeartbeat(&hb); err != nil {
		return err
	}
	ctx := c.Request().Context()
	tok := hostToken(c)
	accepted, err := h.wf.RecordHeartbeat(ctx, tok, hb)
	if errors.Is(err, workflow.ErrHeartbeatsBehind) {
		setRetryAfter(c, workflow.HeartbeatRetryAfter)
	}
	if err != nil {
		return err
	}
	// A replay changed nothing, but the agent is still told what to do:
	// assignments are read, not written.
	na, err := h.wf.Assignments(ctx, tok)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, agentapi.HeartbeatResponse{Accepted: accepted, ServerTime: na.At.Truncate(time.Second),
		IntervalSeconds: int(market.HeartbeatInterval / time.Second), Assignments: agentAssignments(na.Assignments),
		Version: na.Version, Push: true})
}

// handleAgentAssignments is the long-poll of the node's assignments
// (docs/agent.md): answered as soon as they differ from the version the
// agent names, or after its wait (at most agentapi.MaxWaitSeconds) with
// changed false.
func (h *Handler) handleAgentAssignments(c echo.Context) error {
	wait := 0
	if raw := c.QueryParam(agentapi.QueryWait); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 0 {
			msg := "wait is a whole number of seconds."
			return &market.Error{Code: market.CodeInvalid, Message: msg, Fields: map[string]string{agentapi.QueryWait: msg}}
		}
		wait = min(n, agentapi.MaxWaitSeconds)
	}
	na, changed, err := h.wf.WaitAssignments(c.Request().Context(), hostToken(c), c.QueryParam(agentapi.QueryKnown), time.Duration(wait)*time.Second)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, agentapi.Assignments{ServerTime: na.At.Truncate(time.Second), Version: na.Version, Changed: changed,
		Assignments: agentAssignments(na.Assignments)})
}

// agentAssignments is the protocol's form of a node's assignments.
func agentAssignments(as []store.Assignment) []agentapi.Assignment {
	out := make([]agentapi.Assignment, 0, len(as))
	for _, a := range as {
		out = append(out, agentapi.Assignment{ReservationID: a.ReservationID, PieceID: a.Piece.ID,
			Devices: a.Devices, Start: a.Piece.Start, End: a.Piece.End, SSHKeys: a.SSHKeys, Acceptance: a.Acceptance,
			State: string(a.State), Reported: a.Reported, DeviceIndices: a.DeviceIndices, Runtime: agentapi.NewRuntime(a.Runtime)})
	}
	return out
}

// pieceID reads the :piece_id of an assignment path.
func pieceID(c echo.Context) (int64, error) {
	id, err := strconv.ParseInt(c.Param("piece_id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, market.Errorf(market.CodeNotFound, "There is no such assignment.")
	}
	return id, nil
}

// agentAccessReply answers an installed or removed report.
type agentAccessReply struct {
	PieceID     int64      `json:"piece_id"`
	InstalledAt *time.Time `json:"installed_at,omitempty"`
	RemovedAt   *time.Time `json:"removed_at,omitempty"`
}

func accessReply(a store.PieceAccess) agentAccessReply {
	out := agentAccessReply{PieceID: a.PieceID}
	if a.Installed() {
		out.InstalledAt = &a.InstalledAt
	}
	if a.Removed() {
		out.RemovedAt = &a.RemovedAt
	}
	return out
}

// handleAgentInstalled records that the buyer's keys are in place on the
// token's node, with the connection shown to the buyer. A piece not on the
// node is 404 (whoever's it is); a rental not running is 409.
func (h *Handler) handleAgentInstalled(c echo.Context) error {
	id, err := pieceID(c)
	if err != nil {
		return err
	}
	var in agentapi.Installed
	if err := decodeBody(c, &in); err != nil {
		return err
	}
	a, err := h.wf.RecordInstalled(c.Request().Context(), hostToken(c), id, market.Connection{Host: in.Host, Port: in.Port, User: in.User})
	if err != nil {
		return err
	}
	// The agent repeats its report while asked to install: the first is
	// news, the rest are heard at DEBUG.
	level := slog.LevelInfo
	if a.Repeated {
		level = slog.LevelDebug
	}
	logger(c).Log(c.Request().Context(), level, "keys installed", "piece_id", id, "node", a.Node, "offer_id", hostToken(c).OfferID)
	return writeJSON(c, http.StatusOK, accessReply(a))
}

// handleAgentRemoved records that the buyer's keys are gone from the
// token's node. A piece not on the node is 404; a rental still running is
// 409.
func (h *Handler) handleAgentRemoved(c echo.Context) error {
	id, err := pieceID(c)
	if err != nil {
		return err
	}
	var in agentapi.Removed
	if err := decodeBody(c, &in); err != nil {
		return err
	}
	a, err := h.wf.RecordRemoved(c.Request().Context(), hostToken(c), id, in.RemovedAt)
	if err != nil {
		return err
	}
	logger(c).Info("keys removed", "piece_id", id, "node", a.Node, "offer_id", hostToken(c).OfferID)
	return writeJSON(c, http.StatusOK, accessReply(a))
}

func (h *Handler) handleAgentRemoveFailed(c echo.Context) error {
	id, err := pieceID(c)
	if err != nil {
		return err
	}
	var in agentapi.RemoveFailed
	if err := decodeBody(c, &in); err != nil {
		return err
	}
	if err := h.wf.RecordRemoveFailed(c.Request().Context(), hostToken(c), id, in.Message); err != nil {
		return err
	}
	logger(c).Warn("access not ended", "piece_id", id, "offer_id", hostToken(c).OfferID, "message", market.CleanRemoveError(in.Message))
	return writeJSON(c, http.StatusOK, map[string]int64{"piece_id": id})
}

// agentAcceptanceReply answers an acceptance result: how it compares with
// the offer's guaranteed figure.
type agentAcceptanceReply struct {
	PieceID          int64 `json:"piece_id"`
	Guaranteed       int64 `json:"guaranteed,omitempty"`
	DevicesBelow     int   `json:"devices_below"`
	ShortfallBP      int   `json:"shortfall_bp"`
	Underperformance bool  `json:"underperformance"`
}

// handleAgentAcceptance records the acceptance test of a piece on the
// token's node. Only the first result counts (one posted again is answered
// with the stored one). A piece not on the node is 404; one not started 409.
func (h *Handler) handleAgentAcceptance(c echo.Context) error {
	id, err := pieceID(c)
	if err != nil {
		return err
	}
	var in agentapi.Acceptance
	if err := decodeBody(c, &in); err != nil {
		return err
	}
	res, err := market.AcceptanceFromReport(in.Metric, in.PerDevice, int(in.DurationSeconds), in.Error)
	if err != nil {
		return err
	}
	a, err := h.wf.RecordAcceptance(c.Request().Context(), hostToken(c), id, res)
	if err != nil {
		return err
	}
	logger(c).Info("acceptance result", "piece_id", id, "node", a.Node, "metric", string(a.Result.Metric),
		"devices_below", a.DevicesBelow, "shortfall_bp", a.ShortfallBP)
	return writeJSON(c, http.StatusOK, agentAcceptanceReply{PieceID: a.PieceID, Guaranteed: a.Guaranteed, DevicesBelow: a.DevicesBelow,
		ShortfallBP: a.ShortfallBP, Underperformance: a.DevicesBelow > 0})
}

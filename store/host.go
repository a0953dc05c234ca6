package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// HostToken is a provider agent's token for one node of one offer
// (docs/agent.md). The raw token is shown once, when it is created; the
// database keeps its SHA-256 and its first characters (Prefix). LastSeq is
// the highest heartbeat sequence number seen with it. A zero RevokedAt
// means live.
type HostToken struct {
	ID         int64
	OfferID    int64
	ProviderID int64
	Node       int
	Prefix     string
	LastSeq    int64
	CreatedAt  time.Time
	LastUsedAt time.Time
	RevokedAt  time.Time
}

// Revoked reports whether the token has been revoked.
func (t HostToken) Revoked() bool { return !t.RevokedAt.IsZero() }

// HostStatus is the latest accepted heartbeat of one node of an offer.
// HardwareDiffers is the admins' message when the reported devices differ
// from the listing, "" when they match.
type HostStatus struct {
	OfferID         int64
	Node            int
	LastHeartbeatAt time.Time
	LastSeq         int64
	AgentVersion    string
	Probe           string
	ProbeError      string
	Devices         []market.HostDevice
	Healthy         int
	HardwareDiffers string
	// Isolation is how the agent keeps renters apart, as it last said.
	Isolation market.Isolation
}

// Online reports whether the node's last heartbeat is within the grace
// period at now.
func (h HostStatus) Online(now time.Time) bool {
	return !h.LastHeartbeatAt.IsZero() && now.Sub(h.LastHeartbeatAt) <= market.HeartbeatGrace(market.HeartbeatInterval)
}

// HeartbeatRun is a stretch of consecutive heartbeats of a node reporting
// the same health, without a gap longer than the grace period: the
// bounded history kept as evidence.
type HeartbeatRun struct {
	FirstAt, LastAt   time.Time
	FirstSeq, LastSeq int64
	Heartbeats        int
	Devices, Healthy  int
	Unhealthy         string // the unhealthy devices, e.g. "3 (GPU-…)"
	ProbeError        string
}

const (
	hostTokenRawPrefix = "gph_"
	// maxRunsPerNode caps the heartbeat history of a node: a node whose
	// health flaps keeps its most recent changes.
	maxRunsPerNode   = 5000
	hostTokenColumns = `t.id, t.offer_id, o.provider_id, t.node, t.prefix, t.last_seq, t.created_at,
		COALESCE(t.last_used_at, 0), COALESCE(t.revoked_at, 0)`
	hostColumns = `h.offer_id, h.node, h.last_heartbeat_at, h.last_seq, h.agent_version, h.probe, h.probe_error,
		h.devices_json, h.healthy_devices, h.hardware_differs, h.isolation`
	msgHostTokenInvalid  = "This host token is not valid. Create a new one on the provider's hosts page."
	msgHostTokenNotFound = "That host token could not be found."
)

func scanHostToken(s scanner, extra ...any) (HostToken, error) {
	var t HostToken
	var created, used, revoked int64
	dest := append([]any{&t.ID, &t.OfferID, &t.ProviderID, &t.Node, &t.Prefix, &t.LastSeq, &created, &used, &revoked}, extra...)
	if err := s.Scan(dest...); err != nil {
		return HostToken{}, err
	}
	t.CreatedAt = fromUnix(created)
	if used != 0 {
		t.LastUsedAt = fromUnix(used)
	}
	if revoked != 0 {
		t.RevokedAt = fromUnix(revoked)
	}
	return t, nil
}

func scanHost(s scanner) (HostStatus, error) {
	var h HostStatus
	var last int64
	var devices, isolation string
	if err := s.Scan(&h.OfferID, &h.Node, &last, &h.LastSeq, &h.AgentVersion, &h.Probe, &h.ProbeError,
		&devices, &h.Healthy, &h.HardwareDiffers, &isolation); err != nil {
		return HostStatus{}, err
	}
	h.Isolation = market.Isolation(isolation)
	h.LastHeartbeatAt = fromUnix(last)
	if err := json.Unmarshal([]byte(devices), &h.Devices); err != nil {
		return HostStatus{}, fmt.Errorf("host %d/%d devices: %w", h.OfferID, h.Node, err)
	}
	return h, nil
}

func scanRun(s scanner) (HeartbeatRun, error) {
	var r HeartbeatRun
	var first, last int64
	if err := s.Scan(&first, &last, &r.FirstSeq, &r.LastSeq, &r.Heartbeats, &r.Devices, &r.Healthy, &r.Unhealthy, &r.ProbeError); err != nil {
		return HeartbeatRun{}, err
	}
	r.FirstAt, r.LastAt = fromUnix(first), fromUnix(last)
	return r, nil
}

const runColumns = `first_at, last_at, first_seq, last_seq, heartbeats, devices, healthy, unhealthy, probe_error`

// CreateHostToken creates the token of one node of the provider's offer
// (0 ≤ node < the offer's nodes) and returns it with the raw token ("gph_"
// and 32 random bytes, base64url), which is never available again. The
// node's previous live token, if any, is revoked in the same transaction:
// one live token per node. Another provider's offer is not found; a
// suspended provider gets no token (forbidden); a withdrawn offer serves
// nobody (conflict).
func (db *DB) CreateHostToken(ctx context.Context, providerID, offerID int64, node int, now time.Time) (HostToken, string, error) {
	const op = "create host token"
	secret, err := randomToken()
	if err != nil {
		return HostToken{}, "", fail(op, err, "")
	}
	raw := hostTokenRawPrefix + secret
	t := HostToken{OfferID: offerID, ProviderID: providerID, Node: node, Prefix: raw[:tokenPrefixLen], CreatedAt: truncate(now)}

	tx, err := db.begin(ctx)
	if err != nil {
		return HostToken{}, "", fail(op, err, "")
	}
	defer tx.Rollback()
	var suspended bool
	err = tx.QueryRowContext(ctx, `SELECT suspended FROM users WHERE id = ?`, providerID).Scan(&suspended)
	if errors.Is(err, sql.ErrNoRows) {
		return HostToken{}, "", notFound(msgUserNotFound)
	}
	if err != nil {
		return HostToken{}, "", fail(op, err, "")
	}
	if suspended {
		return HostToken{}, "", &market.Error{Code: market.CodeForbidden, Message: "This account is suspended."}
	}
	if err := mayAct(ctx, tx, providerID); err != nil {
		return HostToken{}, "", fail(op, err, "")
	}
	o, err := getOwnOffer(ctx, tx, providerID, offerID)
	if err != nil {
		return HostToken{}, "", fail(op, err, "")
	}
	if o.State == market.OfferWithdrawn {
		return HostToken{}, "", conflict("This offer is withdrawn; its hosts need no agent.")
	}
	if node < 0 || node >= o.Nodes {
		return HostToken{}, "", &market.Error{Code: market.CodeInvalid, Message: "Please correct the highlighted fields.",
			Fields: map[string]string{"node": fmt.Sprintf("Choose a node between 0 and %d.", o.Nodes-1)}}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE host_tokens SET revoked_at = ? WHERE offer_id = ? AND node = ? AND revoked_at IS NULL`,
		unix(now), offerID, node); err != nil {
		return HostToken{}, "", fail(op, err, "")
	}
	if err := tx.QueryRowContext(ctx, `INSERT INTO host_tokens (offer_id, node, prefix, token_hash, created_at)
		VALUES (?, ?, ?, ?, ?) RETURNING id`, offerID, node, t.Prefix, hashToken(raw), unix(now)).Scan(&t.ID); err != nil {
		return HostToken{}, "", fail(op, err, "")
	}
	return t, raw, fail(op, tx.Commit(), "")
}

// RevokeHostToken revokes a token of one of the provider's offers at now;
// it stops working at once. Another provider's token is not found;
// revoking a revoked token keeps the first revocation time.
func (db *DB) RevokeHostToken(ctx context.Context, providerID, tokenID int64, now time.Time) error {
	const op = "revoke host token"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	t, err := scanHostToken(tx.QueryRowContext(ctx, `SELECT `+hostTokenColumns+` FROM host_tokens t
		JOIN offers o ON o.id = t.offer_id WHERE t.id = ?`, tokenID))
	if errors.Is(err, sql.ErrNoRows) || (err == nil && t.ProviderID != providerID) {
		return notFound(msgHostTokenNotFound)
	}
	if err != nil {
		return fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE host_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`, unix(now), tokenID); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// FindHostToken authenticates a raw host token. An unknown or revoked
// token, or one whose provider is suspended, is unauthorized. It reads the
// database every time, so a revocation or suspension takes effect at once.
func (db *DB) FindHostToken(ctx context.Context, raw string) (HostToken, error) {
	const op = "find host token"
	if !strings.HasPrefix(raw, hostTokenRawPrefix) || len(raw) > 128 {
		return HostToken{}, &market.Error{Code: market.CodeUnauthorized, Message: msgHostTokenInvalid}
	}
	stmt, err := db.readStmt(ctx, findHostTokenQuery)
	if err != nil {
		return HostToken{}, fail(op, err, "")
	}
	var suspended bool
	t, err := scanHostToken(stmt.QueryRowContext(ctx, hashToken(raw)), &suspended)
	if errors.Is(err, sql.ErrNoRows) {
		return HostToken{}, &market.Error{Code: market.CodeUnauthorized, Message: msgHostTokenInvalid}
	}
	if err != nil {
		return HostToken{}, fail(op, err, "")
	}
	switch {
	case t.Revoked():
		return HostToken{}, &market.Error{Code: market.CodeUnauthorized, Message: "This host token has been revoked."}
	case suspended:
		return HostToken{}, &market.Error{Code: market.CodeUnauthorized, Message: "The provider's account is suspended."}
	}
	return t, nil
}

const findHostTokenQuery = `SELECT ` + hostTokenColumns + `, u.suspended FROM host_tokens t
	JOIN offers o ON o.id = t.offer_id JOIN users u ON u.id = o.provider_id WHERE t.token_hash = ?`

// liveHostToken re-reads a token inside a write transaction: revoked
// meanwhile, or its provider suspended, it is unauthorized.
func liveHostToken(ctx context.Context, tx querier, tokenID int64) (HostToken, error) {
	var suspended bool
	t, err := scanHostToken(tx.QueryRowContext(ctx, `SELECT `+hostTokenColumns+`, u.suspended FROM host_tokens t
		JOIN offers o ON o.id = t.offer_id JOIN users u ON u.id = o.provider_id WHERE t.id = ?`, tokenID), &suspended)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && (t.Revoked() || suspended)) {
		return HostToken{}, &market.Error{Code: market.CodeUnauthorized, Message: msgHostTokenInvalid}
	}
	return t, err
}

// RecordHeartbeat stores a heartbeat of the token's node received at now,
// in one transaction: unless its seq is not above the highest seen with
// the token (a replay or a reordered heartbeat: nothing changes and it
// reports false), it becomes the node's latest status, extends or starts a
// run of the history, and sets or clears the node's "hardware differs"
// message (a probe failure with no devices leaves it as it was), and is
// measured against the pieces on the node (measureHeartbeat). The
// heartbeat must have passed market.ValidateHeartbeat.
func (db *DB) RecordHeartbeat(ctx context.Context, tokenID int64, hb market.Heartbeat, now time.Time) (bool, error) {
	rec, err := db.RecordHeartbeatRun(ctx, tokenID, hb, now)
	return rec.Accepted, err
}

// HeartbeatRecord is what RecordHeartbeatRun wrote: whether the heartbeat
// was accepted, the node, the history run it extended or started, and the
// node's "hardware differs" message after it.
type HeartbeatRecord struct {
	Accepted        bool
	OfferID         int64
	Node            int
	RunID           int64
	HardwareDiffers string
}

// RecordHeartbeatRun is RecordHeartbeat, telling what it wrote, so that the
// caller can absorb the node's following heartbeats that report the same
// thing into a batch (FlushHeartbeatsSeen). Concurrent calls share one
// write transaction, each heartbeat in its own savepoint, and commit
// together (the heartbeats' group commit, groupcommit.go): a fleet's first
// heartbeats, or a fleet's heartbeats after a restart, cost the writer one
// commit per batch instead of one each. Each heartbeat keeps its own
// all-or-nothing; one that fails is undone alone; a later heartbeat of
// the same node in the batch sees the earlier one's rows, as if it had
// committed first. The call returns after the commit that holds it.
func (db *DB) RecordHeartbeatRun(ctx context.Context, tokenID int64, hb market.Heartbeat, now time.Time) (HeartbeatRecord, error) {
	const op = "record heartbeat"
	var rec HeartbeatRecord
	err := db.groupCommit(ctx, &db.heartbeats, heartbeatGroup, func(ctx context.Context, tx preparedTx) error {
		var err error
		rec, err = recordHeartbeat(ctx, tx, tokenID, hb, now)
		return err
	})
	if err != nil {
		return HeartbeatRecord{}, fail(op, err, "")
	}
	return rec, nil
}

// The statements of a heartbeat written in full, prepared once
// (heartbeatQueries).
const (
	heartbeatSeqQuery  = `UPDATE host_tokens SET last_seq = ?, last_used_at = ? WHERE id = ?`
	heartbeatHostQuery = `INSERT INTO hosts (offer_id, node, last_heartbeat_at, last_seq, agent_version, probe,
			probe_error, devices_json, healthy_devices, hardware_differs, isolation)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (offer_id, node) DO UPDATE SET last_heartbeat_at = excluded.last_heartbeat_at, last_seq = excluded.last_seq,
			agent_version = excluded.agent_version, probe = excluded.probe, probe_error = excluded.probe_error,
			devices_json = excluded.devices_json, healthy_devices = excluded.healthy_devices, hardware_differs = excluded.hardware_differs,
			isolation = excluded.isolation`
)

// heartbeatQueries are prepared for the heartbeats' group commit.
var heartbeatQueries = []string{heartbeatSeqQuery, heartbeatHostQuery, savepointQuery, rollbackToSavepointQuery, releaseSavepointQuery}

// recordHeartbeat is RecordHeartbeatRun's work inside its transaction.
func recordHeartbeat(ctx context.Context, tx querier, tokenID int64, hb market.Heartbeat, now time.Time) (HeartbeatRecord, error) {
	const op = "record heartbeat"
	t, err := liveHostToken(ctx, tx, tokenID)
	if err != nil {
		return HeartbeatRecord{}, fail(op, err, "")
	}
	if hb.Seq <= t.LastSeq {
		return HeartbeatRecord{OfferID: t.OfferID, Node: t.Node}, nil
	}
	if msg := market.SeqProblem(t.LastSeq, hb.Seq, now); msg != "" {
		return HeartbeatRecord{}, &market.Error{Code: market.CodeInvalid, Message: msg, Fields: map[string]string{"seq": msg}}
	}
	if _, err := tx.ExecContext(ctx, heartbeatSeqQuery, hb.Seq, unix(now), t.ID); err != nil {
		return HeartbeatRecord{}, fail(op, err, "")
	}
	o, err := getOffer(ctx, tx, t.OfferID)
	if err != nil {
		return HeartbeatRecord{}, fail(op, err, "")
	}
	prev, err := getHost(ctx, tx, t.OfferID, t.Node)
	if err != nil && market.ErrorCode(err) != market.CodeNotFound {
		return HeartbeatRecord{}, fail(op, err, "")
	}
	reported := err == nil
	differs := prev.HardwareDiffers
	if len(hb.Devices) > 0 || hb.Error == "" {
		differs = ""
		if d := market.HardwareDifferences(o, hb.Devices); len(d) > 0 {
			differs = market.HardwareDiffersMessage(t.Node, d)
		}
	}
	devices, err := json.Marshal(hb.Devices)
	if err != nil {
		return HeartbeatRecord{}, fail(op, err, "")
	}
	if hb.Devices == nil {
		devices = []byte("[]")
	}
	if _, err := tx.ExecContext(ctx, heartbeatHostQuery,
		t.OfferID, t.Node, unix(now), hb.Seq, hb.AgentVersion, hb.Probe, hb.Error, string(devices), hb.HealthyDevices(), differs,
		string(hb.Isolation)); err != nil {
		return HeartbeatRecord{}, fail(op, err, "")
	}
	runID, err := appendHeartbeatRun(ctx, tx, t.OfferID, t.Node, hb, now)
	if err != nil {
		return HeartbeatRecord{}, fail(op, err, "")
	}
	if err := measureHeartbeat(ctx, tx, t.OfferID, t.Node, prev, reported, hb, now); err != nil {
		return HeartbeatRecord{}, fail(op, err, "")
	}
	return HeartbeatRecord{Accepted: true, OfferID: t.OfferID, Node: t.Node, RunID: runID, HardwareDiffers: differs}, nil
}

// unhealthyDevices describes the devices the probe judged unhealthy.
func unhealthyDevices(hb market.Heartbeat) string {
	var parts []string
	for _, d := range hb.Devices {
		if !d.Healthy {
			s := strconv.Itoa(d.Index)
			if d.UUID != "" {
				s += " (" + d.UUID + ")"
			}
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, ", ")
}

// appendHeartbeatRun extends the node's latest run with the heartbeat when
// it reports the same health within the grace period, else starts a run;
// then drops the node's runs beyond maxRunsPerNode. It returns the run's id.
func appendHeartbeatRun(ctx context.Context, tx querier, offerID int64, node int, hb market.Heartbeat, now time.Time) (int64, error) {
	unhealthy := unhealthyDevices(hb)
	var id, lastAt int64
	var devices, healthy int
	var prevUnhealthy, prevError string
	err := tx.QueryRowContext(ctx, `SELECT id, last_at, devices, healthy, unhealthy, probe_error FROM host_heartbeat_runs
		WHERE offer_id = ? AND node = ? ORDER BY id DESC LIMIT 1`, offerID, node).Scan(&id, &lastAt, &devices, &healthy, &prevUnhealthy, &prevError)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, err
	}
	grace := market.HeartbeatGrace(market.HeartbeatInterval)
	if err == nil && devices == len(hb.Devices) && healthy == hb.HealthyDevices() && prevUnhealthy == unhealthy &&
		prevError == hb.Error && now.Sub(fromUnix(lastAt)) <= grace {
		_, err := tx.ExecContext(ctx, `UPDATE host_heartbeat_runs SET last_at = ?, last_seq = ?, heartbeats = heartbeats + 1 WHERE id = ?`,
			unix(now), hb.Seq, id)
		return id, err
	}
	if err := tx.QueryRowContext(ctx, `INSERT INTO host_heartbeat_runs (offer_id, node, first_at, last_at, first_seq, last_seq,
		heartbeats, devices, healthy, unhealthy, probe_error) VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?) RETURNING id`,
		offerID, node, unix(now), unix(now), hb.Seq, hb.Seq, len(hb.Devices), hb.HealthyDevices(), unhealthy, hb.Error).Scan(&id); err != nil {
		return 0, err
	}
	_, err = tx.ExecContext(ctx, `DELETE FROM host_heartbeat_runs WHERE offer_id = ? AND node = ? AND id <= (
		SELECT id FROM host_heartbeat_runs WHERE offer_id = ? AND node = ? ORDER BY id DESC LIMIT 1 OFFSET ?)`,
		offerID, node, offerID, node, maxRunsPerNode)
	return id, err
}

// getHost reads a node's latest status; a node that never reported is not
// found.
func getHost(ctx context.Context, q querier, offerID int64, node int) (HostStatus, error) {
	h, err := scanHost(q.QueryRowContext(ctx, `SELECT `+hostColumns+` FROM hosts h WHERE h.offer_id = ? AND h.node = ?`, offerID, node))
	if errors.Is(err, sql.ErrNoRows) {
		return HostStatus{}, notFound("That host has not reported yet.")
	}
	return h, err
}

func queryRuns(ctx context.Context, q querier, offerID int64, node int, from, to time.Time) ([]HeartbeatRun, error) {
	return collect(ctx, q, scanRun, `SELECT `+runColumns+` FROM host_heartbeat_runs
		WHERE offer_id = ? AND node = ? AND last_at >= ? AND first_at < ? ORDER BY id`, offerID, node, unix(from), unix(to))
}

// HostNode is what a provider's hosts page shows of one node of an offer:
// its live token, its latest status and the rentals placed on it.
type HostNode struct {
	Node     int
	Token    HostToken // zero ID: no live token
	Status   HostStatus
	Reported bool // Status holds a heartbeat
	Rentals  []HostRental
}

// HostRental is a reservation piece placed on a node, with what the node's
// agent did about the buyer's access there.
type HostRental struct {
	ReservationID int64
	State         market.ReservationState
	UpdatedAt     time.Time // when the reservation last changed state
	Piece         market.ReservationPiece
	BuyerID       int64
	BuyerName     string
	Devices       int // of the piece's devices, those on this node
	Access        PieceAccess
}

// HostOffer is one offer of a provider with the nodes that have a token,
// have reported or serve a rental now.
type HostOffer struct {
	Offer market.Offer
	Nodes []HostNode // by node number
}

// ListProviderHosts returns the provider's offers (withdrawn ones
// excluded) with, for each node that has a live token, has reported or has
// a rental running, ending or awaiting the removal of the buyer's keys at
// now, what the hosts page shows.
func (db *DB) ListProviderHosts(ctx context.Context, providerID int64, now time.Time) ([]HostOffer, error) {
	const op = "list provider hosts"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	offers, err := collect(ctx, tx, func(s scanner) (market.Offer, error) { return scanOffer(s) }, `SELECT `+offerColumns+` FROM offers o
		WHERE o.provider_id = ? AND o.state <> ? ORDER BY o.created_at DESC, o.id DESC`, providerID, string(market.OfferWithdrawn))
	if err != nil {
		return nil, fail(op, err, "")
	}
	out := make([]HostOffer, 0, len(offers))
	for _, o := range offers {
		nodes, err := offerHostNodes(ctx, tx, o.ID, now)
		if err != nil {
			return nil, fail(op, err, "")
		}
		out = append(out, HostOffer{Offer: o, Nodes: nodes})
	}
	return out, nil
}

// offerHostNodes gathers the nodes of an offer worth showing at now.
func offerHostNodes(ctx context.Context, q querier, offerID int64, now time.Time) ([]HostNode, error) {
	by := map[int]*HostNode{}
	node := func(n int) *HostNode {
		if by[n] == nil {
			by[n] = &HostNode{Node: n}
		}
		return by[n]
	}
	tokens, err := collect(ctx, q, func(s scanner) (HostToken, error) { return scanHostToken(s) }, `SELECT `+hostTokenColumns+`
		FROM host_tokens t JOIN offers o ON o.id = t.offer_id WHERE t.offer_id = ? AND t.revoked_at IS NULL`, offerID)
	if err != nil {
		return nil, err
	}
	for _, t := range tokens {
		node(t.Node).Token = t
	}
	hosts, err := collect(ctx, q, scanHost, `SELECT `+hostColumns+` FROM hosts h WHERE h.offer_id = ?`, offerID)
	if err != nil {
		return nil, err
	}
	for _, h := range hosts {
		n := node(h.Node)
		n.Status, n.Reported = h, true
	}
	rentals, err := offerRentals(ctx, q, offerID, -1, now)
	if err != nil {
		return nil, err
	}
	for _, r := range rentals {
		for _, s := range r.Piece.Nodes {
			rr := r
			rr.Devices = s.Devices
			if rr.Access, err = getPieceAccess(ctx, q, r.Piece.ID, s.Node); err != nil {
				return nil, err
			}
			n := node(s.Node)
			n.Rentals = append(n.Rentals, rr)
		}
	}
	out := make([]HostNode, 0, len(by))
	for _, n := range by {
		out = append(out, *n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out, nil
}

// offerRentals returns the pieces of an offer (on node, or on any node
// when node < 0) of paid reservations — confirmed, active, completed or
// settled — that end after a day before now, and any piece whose keys were
// installed and not confirmed removed, with their buyer, oldest start
// first.
func offerRentals(ctx context.Context, q querier, offerID int64, node int, now time.Time) ([]HostRental, error) {
	where := `p.offer_id = ? AND ((r.state IN (?, ?, ?, ?) AND p.end_at > ?) OR EXISTS (
		SELECT 1 FROM piece_access a WHERE a.piece_id = p.id AND a.removed_at IS NULL))`
	args := []any{offerID, string(market.ReservationConfirmed), string(market.ReservationActive), string(market.ReservationCompleted),
		string(market.ReservationSettled), unix(now.Add(-24 * time.Hour))}
	if node >= 0 {
		where += ` AND (',' || p.nodes || ',') LIKE ?`
		args = append(args, "%,"+strconv.Itoa(node)+":%")
	}
	rentals, err := collect(ctx, q, func(s scanner) (HostRental, error) {
		var r HostRental
		var state string
		var updated, resold int64
		p, err := scanPiece(s, &r.ReservationID, &state, &updated, &r.BuyerID, &r.BuyerName, &resold)
		if resold != 0 {
			// The holder's rental ends where its remaining time was resold;
			// the buyer's own piece takes over from there (market.AccessEnd).
			p.End = market.AccessEnd(market.Reservation{ResoldAt: fromUnix(resold)}, p)
		}
		r.Piece, r.State, r.UpdatedAt = p, market.ReservationState(state), fromUnix(updated)
		return r, err
	}, `SELECT `+pieceColumns+`, r.id, r.state, r.updated_at, u.id, u.display_name, COALESCE(r.resold_at, 0) FROM reservation_pieces p
		JOIN reservations r ON r.id = p.reservation_id JOIN users u ON u.id = r.buyer_id
		WHERE `+where+` ORDER BY p.start_at, p.id`, args...)
	return rentals, err
}

// HostFlag is a node the admins should look at: its devices differ from
// the listing, or the removal of a buyer's keys on it is not confirmed in
// time. At is the node's last heartbeat, or the rental's end.
type HostFlag struct {
	OfferID      int64
	OfferTitle   string
	ProviderID   int64
	ProviderName string
	Node         int
	Message      string
	At           time.Time
}

// ListHardwareDiffers returns the nodes whose reported devices differ from
// their offer's listing, by offer and node.
func (db *DB) ListHardwareDiffers(ctx context.Context) ([]HostFlag, error) {
	const op = "list hardware differs"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	flags, err := collect(ctx, tx, func(s scanner) (HostFlag, error) {
		var f HostFlag
		var last int64
		err := s.Scan(&f.OfferID, &f.OfferTitle, &f.ProviderID, &f.ProviderName, &f.Node, &f.Message, &last)
		f.At = fromUnix(last)
		return f, err
	}, `SELECT o.id, o.title, u.id, u.display_name, h.node, h.hardware_differs, h.last_heartbeat_at
		FROM hosts h JOIN offers o ON o.id = h.offer_id JOIN users u ON u.id = o.provider_id
		WHERE h.hardware_differs <> '' ORDER BY o.id, h.node`)
	return flags, fail(op, err, "")
}

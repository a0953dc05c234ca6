package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// HeartbeatSeen is the heartbeats of a node absorbed since its last
// written heartbeat (RecordHeartbeatRun) because they reported the same
// thing: Count of them, the latest with Seq at At, all extending the
// history run RunID.
type HeartbeatSeen struct {
	TokenID int64
	OfferID int64
	Node    int
	RunID   int64
	Seq     int64
	At      time.Time
	Count   int
	// Devices, when not "", is the latest heartbeat's devices (JSON), for
	// their telemetry on the hosts page; "" leaves them as written.
	Devices string
}

// FlushHeartbeatsSeen writes a batch of absorbed heartbeats in one
// transaction: for each node, the token's highest sequence number and last
// use, the node's last heartbeat (and its devices, when given), and its
// run's end and count — what
// RecordHeartbeatRun would have written for each of them, the rest being
// unchanged. Nothing moves backwards: a node whose stored sequence number
// is already at or past Seq (a newer heartbeat written meanwhile) keeps it.
func (db *DB) FlushHeartbeatsSeen(ctx context.Context, seen []HeartbeatSeen) error {
	const op = "flush heartbeats seen"
	if len(seen) == 0 {
		return nil
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	tokens, err := tx.PrepareContext(ctx, `UPDATE host_tokens SET last_seq = ?, last_used_at = ? WHERE id = ? AND last_seq < ?`)
	if err != nil {
		return fail(op, err, "")
	}
	defer tokens.Close()
	hosts, err := tx.PrepareContext(ctx, `UPDATE hosts SET last_heartbeat_at = ?, last_seq = ?,
		devices_json = CASE WHEN ? = '' THEN devices_json ELSE ? END WHERE offer_id = ? AND node = ? AND last_seq < ?`)
	if err != nil {
		return fail(op, err, "")
	}
	defer hosts.Close()
	runs, err := tx.PrepareContext(ctx, `UPDATE host_heartbeat_runs SET last_at = ?, last_seq = ?, heartbeats = heartbeats + ?
		WHERE id = ? AND last_seq < ?`)
	if err != nil {
		return fail(op, err, "")
	}
	defer runs.Close()
	for _, s := range seen {
		at := unix(s.At)
		if _, err := tokens.ExecContext(ctx, s.Seq, at, s.TokenID, s.Seq); err != nil {
			return fail(op, err, "")
		}
		if _, err := hosts.ExecContext(ctx, at, s.Seq, s.Devices, s.Devices, s.OfferID, s.Node, s.Seq); err != nil {
			return fail(op, err, "")
		}
		if _, err := runs.ExecContext(ctx, at, s.Seq, s.Count, s.RunID, s.Seq); err != nil {
			return fail(op, err, "")
		}
	}
	return fail(op, tx.Commit(), "")
}

// HostLastSeq returns the highest heartbeat sequence number stored for a
// node (0 when it never reported): the absorbing replica's check that no
// other replica wrote a heartbeat of the node meanwhile.
func (db *DB) HostLastSeq(ctx context.Context, offerID int64, node int) (int64, error) {
	const op = "host last seq"
	stmt, err := db.readStmt(ctx, `SELECT last_seq FROM hosts WHERE offer_id = ? AND node = ?`)
	if err != nil {
		return 0, fail(op, err, "")
	}
	var seq int64
	err = stmt.QueryRowContext(ctx, offerID, node).Scan(&seq)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return seq, fail(op, err, "")
}

// HeartbeatState is what the store holds of a node's last heartbeat, for
// a replica that has not heard the node since it started: its host token
// (with its highest sequence number), its status (Reported false when it
// never reported) and the id of its latest history run.
type HeartbeatState struct {
	Token    HostToken
	Reported bool
	Status   HostStatus
	RunID    int64
}

// NodeHeartbeatState returns what the store holds of the last heartbeat of
// the live token's node, in one read: RecordHeartbeat compares a node's
// first heartbeat since this replica started with it, so that a restart's
// first heartbeats that change nothing are absorbed, not written.
func (db *DB) NodeHeartbeatState(ctx context.Context, tokenID int64) (HeartbeatState, error) {
	const op = "node heartbeat state"
	tx, err := db.read(ctx)
	if err != nil {
		return HeartbeatState{}, fail(op, err, "")
	}
	defer tx.Rollback()
	t, err := liveHostToken(ctx, tx, tokenID)
	if err != nil {
		return HeartbeatState{}, fail(op, err, "")
	}
	st := HeartbeatState{Token: t}
	h, err := getHost(ctx, tx, t.OfferID, t.Node)
	if market.ErrorCode(err) == market.CodeNotFound {
		return st, nil
	}
	if err != nil {
		return HeartbeatState{}, fail(op, err, "")
	}
	st.Reported, st.Status = true, h
	err = tx.QueryRowContext(ctx, `SELECT id FROM host_heartbeat_runs WHERE offer_id = ? AND node = ? ORDER BY id DESC LIMIT 1`,
		t.OfferID, t.Node).Scan(&st.RunID)
	if errors.Is(err, sql.ErrNoRows) {
		st.Reported = false // a status without a history: write the next heartbeat in full
		return st, nil
	}
	return st, fail(op, err, "")
}

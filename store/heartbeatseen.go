package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
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

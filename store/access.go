package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// PieceAccess is what a node's agent reported about the buyer's access to
// a reservation piece: the connection once the keys were installed, and
// when they were installed and removed. Zero times: not (yet) reported.
type PieceAccess struct {
	PieceID     int64
	Node        int
	Connection  market.Connection
	InstalledAt time.Time
	RemovedAt   time.Time
	// Repeated, on RecordInstalled's answer, reports that the keys were
	// already recorded in place: the agent's report came again.
	Repeated bool
}

// Installed reports whether the agent reported the keys in place.
func (a PieceAccess) Installed() bool { return !a.InstalledAt.IsZero() }

// Removed reports whether the agent confirmed the keys removed.
func (a PieceAccess) Removed() bool { return !a.RemovedAt.IsZero() }

const msgAssignmentNotFound = "That assignment could not be found on this node."

// getPieceAccess reads the access of a piece on a node; none reported is
// the zero PieceAccess for that piece and node.
func getPieceAccess(ctx context.Context, q querier, pieceID int64, node int) (PieceAccess, error) {
	a := PieceAccess{PieceID: pieceID, Node: node}
	var installed int64
	var removed sql.NullInt64
	err := q.QueryRowContext(ctx, `SELECT host, port, ssh_user, installed_at, removed_at FROM piece_access WHERE piece_id = ? AND node = ?`,
		pieceID, node).Scan(&a.Connection.Host, &a.Connection.Port, &a.Connection.User, &installed, &removed)
	if errors.Is(err, sql.ErrNoRows) {
		return a, nil
	}
	if err != nil {
		return PieceAccess{}, err
	}
	a.InstalledAt = fromUnix(installed)
	if removed.Valid {
		a.RemovedAt = fromUnix(removed.Int64)
	}
	return a, nil
}

// Assignment is a piece placed on a node that the node's agent must act on
// now (docs/agent.md): install the buyer's keys while the rental runs,
// remove them once it is over.
type Assignment struct {
	ReservationID int64
	Piece         market.ReservationPiece
	Devices       int // of the piece's devices, those on the node
	State         market.AccessState
	SSHKeys       []string // the buyer's keys as authorized_keys lines; only to install
	Acceptance    bool     // run the acceptance test and report it: no result is in yet
	// Runtime is the buyer's container (zero: none), sent to prepare and
	// install; DeviceIndices the node's devices the piece holds
	// (runtime.go).
	Runtime       market.Runtime
	DeviceIndices []int
	Reported      bool // to install, and the agent's installed report is in
}

// ListAssignments returns what the agent of the token's node must act on
// at now, by piece start: only pieces placed on that node, only the state
// market.AccessStateOf gives, the buyer's keys only to install, and the
// acceptance test asked for while the piece runs and no result is in. A
// token revoked meanwhile, or of a suspended provider, is unauthorized.
func (db *DB) ListAssignments(ctx context.Context, tokenID int64, now time.Time) ([]Assignment, error) {
	as, _, err := db.NodeAssignments(ctx, tokenID, now)
	return as, err
}

// NodeAssignments is ListAssignments with the next time after now at which
// they change by the clock alone — a piece on the node starting or ending
// — zero when none will: until then only a committed change can change
// them (the long-poll of docs/agent.md waits for whichever comes first).
func (db *DB) NodeAssignments(ctx context.Context, tokenID int64, now time.Time) ([]Assignment, time.Time, error) {
	const op = "list assignments"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, time.Time{}, fail(op, err, "")
	}
	defer tx.Rollback()
	t, err := liveHostToken(ctx, tx, tokenID)
	if err != nil {
		return nil, time.Time{}, fail(op, err, "")
	}
	rentals, err := offerRentals(ctx, tx, t.OfferID, t.Node, now)
	if err != nil {
		return nil, time.Time{}, fail(op, err, "")
	}
	out := []Assignment{}
	indices, err := nodeDeviceIndices(ctx, tx, t, rentals)
	if err != nil {
		return nil, time.Time{}, fail(op, err, "")
	}
	var next time.Time
	for _, r := range rentals {
		// A piece with a container is prepared PrepareLead before its start.
		for _, at := range []time.Time{r.Piece.Start.Add(-market.PrepareLead), r.Piece.Start, r.Piece.End} {
			if at.After(now) && (next.IsZero() || at.Before(next)) {
				next = at
			}
		}
		a, err := getPieceAccess(ctx, tx, r.Piece.ID, t.Node)
		if err != nil {
			return nil, time.Time{}, fail(op, err, "")
		}
		rt, hasRuntime, err := getReservationRuntime(ctx, tx, r.ReservationID)
		if err != nil {
			return nil, time.Time{}, fail(op, err, "")
		}
		state := market.AccessStateOf(r.State, r.Piece, a.Installed(), a.Removed(), now)
		if state == market.AccessNone && hasRuntime && market.Prepares(r.State, r.Piece, now) {
			state = market.AccessPrepare
		}
		if state == market.AccessNone {
			continue
		}
		as := Assignment{ReservationID: r.ReservationID, Piece: r.Piece, Devices: r.Piece.DevicesOnNode(t.Node), State: state, SSHKeys: []string{},
			DeviceIndices: indices[r.Piece.ID]}
		if hasRuntime && state != market.AccessRemove {
			as.Runtime = rt
		}
		if state == market.AccessInstall {
			as.Reported = a.Installed() && !a.Removed()
			done, err := hasAcceptance(ctx, tx, r.Piece.ID, t.Node)
			if err != nil {
				return nil, time.Time{}, fail(op, err, "")
			}
			as.Acceptance = !done
			keys, err := userSSHKeys(ctx, tx, r.BuyerID)
			if err != nil {
				return nil, time.Time{}, fail(op, err, "")
			}
			for _, k := range keys {
				as.SSHKeys = append(as.SSHKeys, k.Line)
			}
		}
		out = append(out, as)
	}
	return out, next, nil
}

// nodePiece loads a piece for the agent of the token's node, with its
// reservation's state: a piece of another offer, or not placed on the
// token's node, is not found, exactly as a missing one.
func nodePiece(ctx context.Context, tx *sql.Tx, t HostToken, pieceID int64) (market.Reservation, market.ReservationPiece, error) {
	var resID int64
	err := tx.QueryRowContext(ctx, `SELECT reservation_id FROM reservation_pieces WHERE id = ? AND offer_id = ?`, pieceID, t.OfferID).Scan(&resID)
	if errors.Is(err, sql.ErrNoRows) {
		return market.Reservation{}, market.ReservationPiece{}, notFound(msgAssignmentNotFound)
	}
	if err != nil {
		return market.Reservation{}, market.ReservationPiece{}, err
	}
	r, err := getReservation(ctx, tx, resID)
	if err != nil {
		return market.Reservation{}, market.ReservationPiece{}, err
	}
	for _, p := range r.Pieces {
		if p.ID == pieceID && p.DevicesOnNode(t.Node) > 0 {
			p.End = market.AccessEnd(r, p) // the holder's rental ends where its time was resold
			return r, p, nil
		}
	}
	return market.Reservation{}, market.ReservationPiece{}, notFound(msgAssignmentNotFound)
}

// RecordInstalled records, at now, the agent's report that the buyer's
// keys are in place on the token's node for a piece, with the connection
// the buyer is to use (checked by market.ValidateConnection). It may come
// again while the rental runs (the agent repeats it while asked to
// install): the first installation time is kept, the connection updated
// and the answer marked Repeated. A piece not on the token's node is not
// found; one whose rental is not running is a conflict.
func (db *DB) RecordInstalled(ctx context.Context, tokenID, pieceID int64, conn market.Connection, now time.Time) (PieceAccess, error) {
	const op = "record installed"
	if err := market.ValidateConnection(&conn); err != nil {
		return PieceAccess{}, err
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return PieceAccess{}, fail(op, err, "")
	}
	defer tx.Rollback()
	t, err := liveHostToken(ctx, tx, tokenID)
	if err != nil {
		return PieceAccess{}, fail(op, err, "")
	}
	r, p, err := nodePiece(ctx, tx, t, pieceID)
	if err != nil {
		return PieceAccess{}, fail(op, err, "")
	}
	a, err := getPieceAccess(ctx, tx, p.ID, t.Node)
	if err != nil {
		return PieceAccess{}, fail(op, err, "")
	}
	if market.AccessStateOf(r.State, p, a.Installed(), a.Removed(), now) != market.AccessInstall {
		return PieceAccess{}, conflict(fmt.Sprintf("The rental of piece %d is not running (%s); its keys are not to be installed.",
			p.ID, market.FormatSpan(p.Start, p.End)))
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO piece_access (piece_id, node, host, port, ssh_user, installed_at)
		VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (piece_id, node) DO UPDATE SET host = excluded.host, port = excluded.port, ssh_user = excluded.ssh_user,
			removed_at = NULL`, p.ID, t.Node, conn.Host, conn.Port, conn.User, unix(now)); err != nil {
		return PieceAccess{}, fail(op, err, "")
	}
	repeated := a.Installed() && !a.Removed()
	if !a.Installed() {
		if err := notifyReplacementReady(ctx, tx, r, p, t.Node, conn, now); err != nil {
			return PieceAccess{}, fail(op, err, "")
		}
	}
	if a, err = getPieceAccess(ctx, tx, p.ID, t.Node); err != nil {
		return PieceAccess{}, fail(op, err, "")
	}
	a.Repeated = repeated
	return a, fail(op, tx.Commit(), "")
}

// RecordRemoved records the agent's confirmation that the buyer's keys are
// gone from the token's node for a piece. removedAt is when the agent
// removed them (on the server's clock as it last saw it; zero means now),
// kept between the installation and now. Keys never installed or already
// confirmed removed change nothing. A piece not on the token's node is not
// found; one whose rental still runs is a conflict.
func (db *DB) RecordRemoved(ctx context.Context, tokenID, pieceID int64, removedAt, now time.Time) (PieceAccess, error) {
	const op = "record removed"
	tx, err := db.begin(ctx)
	if err != nil {
		return PieceAccess{}, fail(op, err, "")
	}
	defer tx.Rollback()
	t, err := liveHostToken(ctx, tx, tokenID)
	if err != nil {
		return PieceAccess{}, fail(op, err, "")
	}
	r, p, err := nodePiece(ctx, tx, t, pieceID)
	if err != nil {
		return PieceAccess{}, fail(op, err, "")
	}
	a, err := getPieceAccess(ctx, tx, p.ID, t.Node)
	if err != nil {
		return PieceAccess{}, fail(op, err, "")
	}
	if market.AccessStateOf(r.State, p, a.Installed(), a.Removed(), now) == market.AccessInstall {
		return PieceAccess{}, conflict(fmt.Sprintf("The rental of piece %d runs until %s; its keys stay until then.", p.ID, market.FormatTime(p.End)))
	}
	if !a.Installed() || a.Removed() {
		return a, nil
	}
	at := removedAt
	if at.IsZero() || at.After(now) {
		at = now
	}
	if at.Before(a.InstalledAt) {
		at = a.InstalledAt
	}
	if _, err := tx.ExecContext(ctx, `UPDATE piece_access SET removed_at = ?, remove_error = '', remove_error_at = 0 WHERE piece_id = ? AND node = ?`, unix(at), p.ID, t.Node); err != nil {
		return PieceAccess{}, fail(op, err, "")
	}
	a.RemovedAt = truncate(at)
	return a, fail(op, tx.Commit(), "")
}

// RecordRemoveFailed records, at now, the agent's report that it could not
// end the access it installed for a piece on the token's node (msg: what
// failed, clipped to market.MaxContainerMessage). A new message notifies
// the provider; the node is listed for the admins
// (ListAccessRemovalFailures) until "removed" is reported. A piece whose
// access is not installed, or already removed, is a conflict.
func (db *DB) RecordRemoveFailed(ctx context.Context, tokenID, pieceID int64, msg string, now time.Time) error {
	const op = "record remove failed"
	msg = market.CleanRemoveError(msg)
	if msg == "" {
		return &market.Error{Code: market.CodeInvalid, Message: "Say what failed.", Fields: map[string]string{"message": "Say what failed."}}
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	t, err := liveHostToken(ctx, tx, tokenID)
	if err != nil {
		return fail(op, err, "")
	}
	r, p, err := nodePiece(ctx, tx, t, pieceID)
	if err != nil {
		return fail(op, err, "")
	}
	a, err := getPieceAccess(ctx, tx, p.ID, t.Node)
	if err != nil {
		return fail(op, err, "")
	}
	if !a.Installed() || a.Removed() {
		return conflict(fmt.Sprintf("Piece %d has no access on node %d to remove.", p.ID, t.Node))
	}
	var prev string
	if err := tx.QueryRowContext(ctx, `SELECT remove_error FROM piece_access WHERE piece_id = ? AND node = ?`, p.ID, t.Node).Scan(&prev); err != nil {
		return fail(op, err, "")
	}
	if prev == msg {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `UPDATE piece_access SET remove_error = ?, remove_error_at = ? WHERE piece_id = ? AND node = ?`,
		msg, unix(now), p.ID, t.Node); err != nil {
		return fail(op, err, "")
	}
	if err := insertNotification(ctx, tx, Notification{UserID: p.ProviderID, Kind: NotifyIncidentReported, CreatedAt: now,
		URL: fmt.Sprintf("/provider/bookings/%d", r.ID),
		Message: fmt.Sprintf("Booking #%d, piece %d, node %d: the agent could not end the buyer's access (%s). End it by hand: the buyer must not keep the machine.",
			r.ID, p.ID, t.Node, msg)}); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// scanRemovalFailure reads a node whose agent could not remove what it
// held for a piece (offer, title, provider, name, node, message, at,
// reservation, piece) into a flag saying what failed.
func scanRemovalFailure(what string) func(scanner) (HostFlag, error) {
	return func(s scanner) (HostFlag, error) {
		var f HostFlag
		var at, resID, pieceID int64
		var msg string
		err := s.Scan(&f.OfferID, &f.OfferTitle, &f.ProviderID, &f.ProviderName, &f.Node, &msg, &at, &resID, &pieceID)
		f.At = fromUnix(at)
		f.Message = fmt.Sprintf("Reservation #%d, piece %d: %s (%s).", resID, pieceID, what, msg)
		return f, err
	}
}

// ListAccessRemovalFailures returns the nodes whose agent reported it could
// not end a buyer's access, for the admins, by offer and node.
func (db *DB) ListAccessRemovalFailures(ctx context.Context) ([]HostFlag, error) {
	const op = "list access removal failures"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	flags, err := collect(ctx, tx, scanRemovalFailure("the buyer's access could not be ended"), `SELECT o.id, o.title, u.id, u.display_name, a.node, a.remove_error, a.remove_error_at, p.reservation_id, p.id
		FROM piece_access a JOIN reservation_pieces p ON p.id = a.piece_id JOIN offers o ON o.id = p.offer_id
		JOIN users u ON u.id = o.provider_id
		WHERE a.remove_error <> '' AND a.removed_at IS NULL ORDER BY o.id, a.node`)
	return flags, fail(op, err, "")
}

// NodeAccess is one node serving a buyer's piece: the access its agent
// reported and the node's latest status.
type NodeAccess struct {
	PieceID  int64
	Node     int
	Devices  int
	Access   PieceAccess
	Host     HostStatus
	Reported bool // the node's agent has reported
}

// ListReservationAccess returns, for a reservation of the buyer, each node
// of each piece with its access and status, in piece then node order.
// Another buyer's reservation is not found: the connection is for the
// buyer only.
func (db *DB) ListReservationAccess(ctx context.Context, buyerID, reservationID int64) ([]NodeAccess, error) {
	const op = "list reservation access"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	r, err := getBuyerReservation(ctx, tx, buyerID, reservationID)
	if err != nil {
		return nil, fail(op, err, "")
	}
	var out []NodeAccess
	for _, p := range r.Pieces {
		for _, s := range p.Nodes {
			na := NodeAccess{PieceID: p.ID, Node: s.Node, Devices: s.Devices}
			if na.Access, err = getPieceAccess(ctx, tx, p.ID, s.Node); err != nil {
				return nil, fail(op, err, "")
			}
			h, err := getHost(ctx, tx, p.OfferID, s.Node)
			switch {
			case err == nil:
				na.Host, na.Reported = h, true
			case market.ErrorCode(err) != market.CodeNotFound:
				return nil, fail(op, err, "")
			}
			out = append(out, na)
		}
	}
	return out, nil
}

// ListOverdueRemovals returns the nodes where a buyer's keys were
// installed and their removal is not confirmed market.RemovalDeadline
// after the rental ended, for the admins, by offer and node.
func (db *DB) ListOverdueRemovals(ctx context.Context, now time.Time) ([]HostFlag, error) {
	const op = "list overdue removals"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	type row struct {
		flag  HostFlag
		resID int64
		state market.ReservationState
		upd   time.Time
		piece market.ReservationPiece
		inst  time.Time
	}
	rows, err := collect(ctx, tx, func(s scanner) (row, error) {
		var r row
		var state string
		var upd, inst int64
		p, err := scanPiece(s, &r.resID, &state, &upd, &r.flag.OfferTitle, &r.flag.ProviderName, &r.flag.Node, &inst)
		r.piece, r.state, r.upd, r.inst = p, market.ReservationState(state), fromUnix(upd), fromUnix(inst)
		r.flag.OfferID, r.flag.ProviderID = p.OfferID, p.ProviderID
		return r, err
	}, `SELECT `+pieceColumns+`, r.id, r.state, r.updated_at, o.title, u.display_name, a.node, a.installed_at
		FROM piece_access a JOIN reservation_pieces p ON p.id = a.piece_id JOIN reservations r ON r.id = p.reservation_id
		JOIN offers o ON o.id = p.offer_id JOIN users u ON u.id = o.provider_id
		WHERE a.removed_at IS NULL AND p.end_at <= ?`, unix(now))
	if err != nil {
		return nil, fail(op, err, "")
	}
	var out []HostFlag
	for _, r := range rows {
		if !market.RemovalOverdue(r.state, r.piece, true, false, r.upd, now) {
			continue
		}
		f := r.flag
		f.At = r.piece.End
		f.Message = fmt.Sprintf("Reservation #%d, piece %d: the buyer's keys, installed %s, are not confirmed removed since the end at %s.",
			r.resID, r.piece.ID, market.FormatTime(r.inst), market.FormatTime(r.piece.End))
		out = append(out, f)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].OfferID != out[j].OfferID {
			return out[i].OfferID < out[j].OfferID
		}
		return out[i].Node < out[j].Node
	})
	return out, nil
}

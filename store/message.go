package store

import (
	"context"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// A reservation's messages (issue 31, docs/booking.md): one thread per
// reservation between its buyer and its providers, the contact channel of
// offers whose hosts run no agent. The parties read and write it
// (market.MessageRoleOf); an admin reads it, as a dispute's evidence.

// ReservationMessage is one message of a reservation's thread.
type ReservationMessage struct {
	ID            int64
	ReservationID int64
	AuthorID      int64
	AuthorName    string
	// AuthorRole is who wrote it, as the thread shows: buyer or provider.
	AuthorRole market.MessageRole
	Body       string
	CreatedAt  time.Time
}

// MessageThread is a reservation's thread as one reader sees it.
type MessageThread struct {
	Reservation market.Reservation
	// Role is the reader's part in it; "" for an admin, who only reads.
	Role     market.MessageRole
	Messages []ReservationMessage
}

const msgThreadNotFound = "That reservation could not be found."

// reservationMessages returns r's messages, oldest first.
func reservationMessages(ctx context.Context, q querier, r market.Reservation) ([]ReservationMessage, error) {
	return collect(ctx, q, func(s scanner) (ReservationMessage, error) {
		var m ReservationMessage
		var created int64
		if err := s.Scan(&m.ID, &m.ReservationID, &m.AuthorID, &m.AuthorName, &m.Body, &created); err != nil {
			return ReservationMessage{}, err
		}
		m.CreatedAt = fromUnix(created)
		m.AuthorRole = market.MessageRoleOf(r, m.AuthorID)
		return m, nil
	}, `SELECT m.id, m.reservation_id, m.author_id, u.display_name, m.body, m.created_at
		FROM reservation_messages m JOIN users u ON u.id = m.author_id
		WHERE m.reservation_id = ? ORDER BY m.id`, r.ID)
}

// ReservationThread returns a reservation's messages for one of its
// parties; anyone else is told it is not found, as for any reservation
// not theirs.
func (db *DB) ReservationThread(ctx context.Context, userID, reservationID int64) (MessageThread, error) {
	return db.thread(ctx, "reservation thread", reservationID, func(r market.Reservation) (market.MessageRole, bool) {
		role := market.MessageRoleOf(r, userID)
		return role, role != ""
	})
}

// AdminReservationThread returns any reservation's messages, for an
// admin (who reads, and does not write).
func (db *DB) AdminReservationThread(ctx context.Context, reservationID int64) (MessageThread, error) {
	return db.thread(ctx, "admin reservation thread", reservationID, func(market.Reservation) (market.MessageRole, bool) { return "", true })
}

func (db *DB) thread(ctx context.Context, op string, reservationID int64, may func(market.Reservation) (market.MessageRole, bool)) (MessageThread, error) {
	tx, err := db.read(ctx)
	if err != nil {
		return MessageThread{}, fail(op, err, "")
	}
	defer tx.Rollback()
	r, err := getReservation(ctx, tx, reservationID)
	if err != nil {
		return MessageThread{}, fail(op, err, "")
	}
	role, ok := may(r)
	if !ok {
		return MessageThread{}, notFound(msgThreadNotFound)
	}
	ms, err := reservationMessages(ctx, tx, r)
	if err != nil {
		return MessageThread{}, fail(op, err, "")
	}
	return MessageThread{Reservation: r, Role: role, Messages: ms}, nil
}

// PostReservationMessage adds, at now, a message of userID (checked by
// market.ValidateMessage) to a reservation's thread, in one transaction
// with a notification — mailed unless turned off — to the other side
// (market.MessageRecipients). Someone who is no party to the reservation
// is told it is not found; a thread at market.MaxMessages is a conflict.
func (db *DB) PostReservationMessage(ctx context.Context, userID, reservationID int64, body string, now time.Time) (ReservationMessage, error) {
	const op = "post reservation message"
	body, err := market.ValidateMessage(body)
	if err != nil {
		return ReservationMessage{}, err
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return ReservationMessage{}, fail(op, err, "")
	}
	defer tx.Rollback()
	r, err := getReservation(ctx, tx, reservationID)
	if err != nil {
		return ReservationMessage{}, fail(op, err, "")
	}
	role := market.MessageRoleOf(r, userID)
	if role == "" {
		return ReservationMessage{}, notFound(msgThreadNotFound)
	}
	if err := mayAct(ctx, tx, userID); err != nil {
		return ReservationMessage{}, fail(op, err, "")
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM reservation_messages WHERE reservation_id = ?`, r.ID).Scan(&n); err != nil {
		return ReservationMessage{}, fail(op, err, "")
	}
	if n >= market.MaxMessages {
		return ReservationMessage{}, conflict(fmt.Sprintf("This reservation already has %d messages, the most it can take; open a dispute if something is wrong.", market.MaxMessages))
	}
	m := ReservationMessage{ReservationID: r.ID, AuthorID: userID, AuthorRole: role, Body: body, CreatedAt: truncate(now)}
	if err := tx.QueryRowContext(ctx, `INSERT INTO reservation_messages (reservation_id, author_id, body, created_at) VALUES (?, ?, ?, ?) RETURNING id`,
		r.ID, userID, body, unix(now)).Scan(&m.ID); err != nil {
		return ReservationMessage{}, fail(op, err, "")
	}
	kind := market.NoticeMessageFromProvider
	if role == market.MessageBuyer {
		kind = market.NoticeMessageFromBuyer
	}
	for _, to := range market.MessageRecipients(r, userID) {
		if err := insertNotification(ctx, tx, Notification{UserID: to, Kind: NotifyReservationMessage, CreatedAt: now,
			URL:    MessagesPath(r.ID),
			Notice: market.Notice{Kind: kind, Params: market.NoticeParams{Reservation: r.ID, Text: market.MessageExcerpt(body, 300)}}}); err != nil {
			return ReservationMessage{}, fail(op, err, "")
		}
	}
	return m, fail(op, tx.Commit(), "")
}

// MessagesPath is the page of a reservation's messages, for its parties
// and admins alike.
func MessagesPath(reservationID int64) string {
	return fmt.Sprintf("/reservations/%d/messages", reservationID)
}

package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// extensionHeldQuery finds an extension of a reservation that still holds
// capacity (holdsCapacity's arguments follow the reservation's id).
const extensionHeldQuery = `SELECT r.id FROM reservations r WHERE r.extends_id = ? AND ` + holdsCapacity + ` ORDER BY r.id LIMIT 1`

// CreateExtension books pieces that continue the buyer's running
// reservation extendsID (market.ExtensionPieces: the same offers, devices
// and nodes from where its pieces end) as a new reservation held until
// now+hold, in one write transaction with the same checks as
// CreateReservation: it re-reads the reservation and refuses unless it is
// still running and the pieces continue it (market.CheckExtension); it
// refuses while an earlier extension of it holds capacity, and when the
// buyer has market.MaxUnpaidHolds unpaid holds; and it re-checks capacity
// on the very nodes the pieces name (market.PlaceCommitments), all pieces
// or none. The extension runs in the reservation's runtime, if it has one.
// Prices and amounts are the caller's.
func (db *DB) CreateExtension(ctx context.Context, buyerID, extendsID int64, pieces []market.ReservationPiece, now time.Time, hold time.Duration) (market.Reservation, error) {
	const op = "create extension"
	if hold <= 0 {
		return market.Reservation{}, fmt.Errorf("store: %s: hold %s must be positive", op, hold)
	}
	r, offerIDs, byOffer := newHold(buyerID, pieces, now, hold)
	r.ExtendsID = extendsID

	// The buyer's lock covers the reservation extended (only its buyer
	// extends it) and its extensions; the runtime copied with it counts
	// no template's use.
	err := db.book(ctx, bookingLocks{offers: offerIDs, buyers: []int64{buyerID}}, func(ctx context.Context, tx preparedTx) error {
		orig, err := getBuyerReservation(ctx, tx, buyerID, extendsID)
		if err != nil {
			return err
		}
		if err := market.CheckExtension(orig, r.Pieces, now); err != nil {
			return err
		}
		r.RequestJSON = orig.RequestJSON
		var other int64
		err = tx.QueryRowContext(ctx, extensionHeldQuery, append([]any{extendsID}, holdsCapacityArgs(now)...)...).Scan(&other)
		if err == nil {
			return conflict(fmt.Sprintf("Reservation #%d already continues this one; pay for or cancel it, or extend it once it runs.", other))
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		held, err := countHeld(ctx, tx, buyerID, now)
		if err != nil {
			return err
		}
		if held >= market.MaxUnpaidHolds {
			return conflict(fmt.Sprintf(
				"You already have %d unpaid reservations. Pay for or cancel one before extending.", held))
		}
		for _, offerID := range offerIDs {
			if err := reserveOnOffer(ctx, tx, offerID, r.Pieces, byOffer[offerID], now); err != nil {
				if market.ErrorCode(err) == market.CodeConflict && market.ErrorMessage(err) == msgBookedMeanwhile {
					return conflict("Some of these devices are booked after your reservation, so it cannot be extended that long.")
				}
				return err
			}
		}
		if r.ID, err = insertReservation(ctx, tx, r); err != nil {
			return err
		}
		// The buyer's environment continues with the rental (a template's
		// use is counted once, by the booking it came with).
		_, err = tx.ExecContext(ctx, `INSERT INTO reservation_runtimes (reservation_id, runtime_json)
			SELECT ?, runtime_json FROM reservation_runtimes WHERE reservation_id = ?`, r.ID, extendsID)
		return err
	})
	if err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	return r, nil
}

// FindExtensions returns the reservations that continue reservation id,
// oldest first, with their pieces.
func (db *DB) FindExtensions(ctx context.Context, id int64) ([]market.Reservation, error) {
	const op = "find extensions"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()

	rs, err := queryReservations(ctx, tx, `SELECT `+reservationColumns+` FROM reservations r WHERE r.extends_id = ? ORDER BY r.id`, id)
	if err != nil {
		return nil, fail(op, err, "")
	}
	return rs, nil
}

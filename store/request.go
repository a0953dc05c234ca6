package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpumarket/gpumarket/market"
)

// SavedRequest is a buyer's request (the portable request JSON) saved
// under a name to reopen later.
type SavedRequest struct {
	ID, BuyerID          int64
	Name                 string
	JSON                 string
	CreatedAt, UpdatedAt time.Time
}

// MaxSavedRequestName is the longest name of a saved request, in characters.
const MaxSavedRequestName = 80

const (
	msgSavedRequestNotFound = "That saved request could not be found."
	savedRequestColumns     = `id, buyer_id, name, request_json, created_at, updated_at`
)

func scanSavedRequest(s scanner) (SavedRequest, error) {
	var r SavedRequest
	var created, updated int64
	if err := s.Scan(&r.ID, &r.BuyerID, &r.Name, &r.JSON, &created, &updated); err != nil {
		return SavedRequest{}, err
	}
	r.CreatedAt, r.UpdatedAt = fromUnix(created), fromUnix(updated)
	return r, nil
}

// SaveRequest stores the request JSON under name (trimmed, 1 to
// MaxSavedRequestName characters) for the buyer. Saving under a name the
// buyer already uses replaces that request's JSON, keeping its id and
// creation time. The JSON is stored as given; check it with the market
// request decoder first.
func (db *DB) SaveRequest(ctx context.Context, buyerID int64, name, json string, now time.Time) (SavedRequest, error) {
	const op = "save request"
	p := market.Problems{}
	name = strings.TrimSpace(name)
	switch n := utf8.RuneCountInString(name); {
	case n == 0:
		p.Add("name", "Give the request a name.")
	case n > MaxSavedRequestName:
		p.Add("name", "Keep the name to 80 characters or fewer.")
	}
	if msg := market.TextProblem(name, false); msg != "" {
		p.Add("name", msg)
	}
	if strings.TrimSpace(json) == "" {
		p.Add("json", "There is no request to save.")
	} else if len(json) > market.MaxJSONBytes {
		p.Add("json", "The request is too large to save.")
	}
	if err := p.Err(); err != nil {
		return SavedRequest{}, err
	}

	tx, err := db.begin(ctx)
	if err != nil {
		return SavedRequest{}, fail(op, err, "")
	}
	defer tx.Rollback()

	r, err := scanSavedRequest(tx.QueryRowContext(ctx, `
		INSERT INTO saved_requests (buyer_id, name, request_json, created_at, updated_at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (buyer_id, name) DO UPDATE SET request_json = excluded.request_json, updated_at = excluded.updated_at
		RETURNING `+savedRequestColumns,
		buyerID, name, json, unix(now), unix(now)))
	if err != nil {
		return SavedRequest{}, fail(op, err, "")
	}
	if err := tx.Commit(); err != nil {
		return SavedRequest{}, fail(op, err, "")
	}
	return r, nil
}

// ListSavedRequests returns the buyer's saved requests, most recently
// saved first.
func (db *DB) ListSavedRequests(ctx context.Context, buyerID int64) ([]SavedRequest, error) {
	const op = "list saved requests"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()

	out, err := collect(ctx, tx, scanSavedRequest, `SELECT `+savedRequestColumns+` FROM saved_requests
		WHERE buyer_id = ? ORDER BY updated_at DESC, id DESC`, buyerID)
	if err != nil {
		return nil, fail(op, err, "")
	}
	return out, nil
}

// FindSavedRequest returns a saved request of the buyer; another buyer's
// is not found.
func (db *DB) FindSavedRequest(ctx context.Context, buyerID, id int64) (SavedRequest, error) {
	const op = "find saved request"
	tx, err := db.read(ctx)
	if err != nil {
		return SavedRequest{}, fail(op, err, "")
	}
	defer tx.Rollback()

	r, err := scanSavedRequest(tx.QueryRowContext(ctx, `SELECT `+savedRequestColumns+` FROM saved_requests
		WHERE id = ? AND buyer_id = ?`, id, buyerID))
	if errors.Is(err, sql.ErrNoRows) {
		return SavedRequest{}, notFound(msgSavedRequestNotFound)
	}
	if err != nil {
		return SavedRequest{}, fail(op, err, "")
	}
	return r, nil
}

// DeleteSavedRequest deletes a saved request of the buyer; another buyer's
// is not found.
func (db *DB) DeleteSavedRequest(ctx context.Context, buyerID, id int64) error {
	const op = "delete saved request"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()

	res, err := tx.ExecContext(ctx, `DELETE FROM saved_requests WHERE id = ? AND buyer_id = ?`, id, buyerID)
	if err != nil {
		return fail(op, err, "")
	}
	if n, err := res.RowsAffected(); err != nil {
		return fail(op, err, "")
	} else if n == 0 {
		return notFound(msgSavedRequestNotFound)
	}
	return fail(op, tx.Commit(), "")
}

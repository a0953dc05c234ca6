package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

const sshKeyColumns = `id, user_id, key_type, bits, fingerprint, comment, public_key, created_at`

func scanSSHKey(s scanner) (market.SSHKey, error) {
	var k market.SSHKey
	var created int64
	if err := s.Scan(&k.ID, &k.UserID, &k.Type, &k.Bits, &k.Fingerprint, &k.Comment, &k.Line, &created); err != nil {
		return market.SSHKey{}, err
	}
	k.CreatedAt = fromUnix(created)
	return k, nil
}

// AddSSHKey stores a public key of the user, parsed and checked by the
// caller (market.SSHKeyProblem). The same key twice is a conflict; more
// than market.MaxSSHKeys keys is invalid.
func (db *DB) AddSSHKey(ctx context.Context, userID int64, k market.SSHKey, now time.Time) (market.SSHKey, error) {
	const op = "add ssh key"
	if msg := market.SSHKeyProblem(k.Type, k.Bits); msg != "" || k.Line == "" || k.Fingerprint == "" {
		return market.SSHKey{}, invalid("That SSH key could not be read; paste it again.")
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return market.SSHKey{}, fail(op, err, "")
	}
	defer tx.Rollback()
	if err := mayAct(ctx, tx, userID); err != nil {
		return market.SSHKey{}, fail(op, err, "")
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM ssh_keys WHERE user_id = ?`, userID).Scan(&n); err != nil {
		return market.SSHKey{}, fail(op, err, "")
	}
	if n >= market.MaxSSHKeys {
		return market.SSHKey{}, invalid(fmt.Sprintf("You have %d SSH keys, the most an account keeps; remove one you no longer use first.", n))
	}
	k.UserID, k.CreatedAt = userID, truncate(now)
	if err := tx.QueryRowContext(ctx, `INSERT INTO ssh_keys (user_id, key_type, bits, fingerprint, comment, public_key, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id`, userID, k.Type, k.Bits, k.Fingerprint, k.Comment, k.Line, unix(now)).Scan(&k.ID); err != nil {
		return market.SSHKey{}, fail(op, err, "You have already added this key.")
	}
	return k, fail(op, tx.Commit(), "")
}

// ListSSHKeys returns the user's public keys, oldest first. Only the user
// (their account page) and the agents of the nodes they rent (through
// ListAssignments) ever read them.
func (db *DB) ListSSHKeys(ctx context.Context, userID int64) ([]market.SSHKey, error) {
	const op = "list ssh keys"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	keys, err := userSSHKeys(ctx, tx, userID)
	return keys, fail(op, err, "")
}

func userSSHKeys(ctx context.Context, q querier, userID int64) ([]market.SSHKey, error) {
	return collect(ctx, q, scanSSHKey, `SELECT `+sshKeyColumns+` FROM ssh_keys WHERE user_id = ? ORDER BY id`, userID)
}

// RemoveSSHKey deletes a key of the user; another user's key is not found.
func (db *DB) RemoveSSHKey(ctx context.Context, userID, keyID int64) error {
	const op = "remove ssh key"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	var owner int64
	err = tx.QueryRowContext(ctx, `SELECT user_id FROM ssh_keys WHERE id = ?`, keyID).Scan(&owner)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && owner != userID) {
		return notFound("That SSH key could not be found.")
	}
	if err != nil {
		return fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM ssh_keys WHERE id = ?`, keyID); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

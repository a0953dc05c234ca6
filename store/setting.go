package store

import (
	"context"
	"database/sql"
	"errors"
)

// GetSetting returns the value stored under key, or a not-found error when
// none is. Settings are small operational facts such as "demo data loaded".
func (db *DB) GetSetting(ctx context.Context, key string) (string, error) {
	var v string
	err := db.reader.QueryRowContext(ctx, `SELECT value FROM settings WHERE name = ?`, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", notFound(msgSettingNotFound)
	}
	if err != nil {
		return "", fail("get setting", err, "")
	}
	return v, nil
}

// SetSetting stores value under key, replacing any previous value.
func (db *DB) SetSetting(ctx context.Context, key, value string) error {
	const op = "set setting"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()

	if _, err := tx.ExecContext(ctx, `
		INSERT INTO settings (name, value) VALUES (?, ?)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value`, key, value); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

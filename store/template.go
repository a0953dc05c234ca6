package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"slices"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// Template is a runtime saved under a name (docs/runtime.md): the
// author's own, or public (listed to every buyer with the author and how
// many reservations used it). Runtime holds the secrets' values only as
// read by FindTemplateForUse for its author; every listing drops them.
type Template struct {
	market.Template
	ID         int64
	AuthorID   int64
	AuthorName string
	UsedBy     int
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

const (
	msgTemplateNotFound = "That template could not be found."
	templateColumns     = `t.id, t.author_id, u.display_name, t.name, t.description, t.public, t.runtime_json, t.used_by, t.created_at, t.updated_at`
	templateFrom        = ` FROM runtime_templates t JOIN users u ON u.id = t.author_id`
)

func scanTemplate(s scanner) (Template, error) {
	var t Template
	var doc string
	var created, updated int64
	if err := s.Scan(&t.ID, &t.AuthorID, &t.AuthorName, &t.Name, &t.Description, &t.Public, &doc, &t.UsedBy, &created, &updated); err != nil {
		return Template{}, err
	}
	rt, err := market.DecodeRuntimeStored([]byte(doc))
	if err != nil {
		return Template{}, err
	}
	t.Runtime, t.CreatedAt, t.UpdatedAt = rt, fromUnix(created), fromUnix(updated)
	return t, nil
}

// SaveTemplate stores a runtime under a name for its author (checked by
// market.ValidateTemplate); saving under a name the author already uses
// replaces that template, keeping its id, creation time and use count. A
// secret sent without a value keeps the value it had.
func (db *DB) SaveTemplate(ctx context.Context, authorID int64, tpl market.Template, now time.Time) (Template, error) {
	const op = "save template"
	if err := market.ValidateTemplate(&tpl); err != nil {
		return Template{}, err
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return Template{}, fail(op, err, "")
	}
	defer tx.Rollback()
	if err := mayAct(ctx, tx, authorID); err != nil {
		return Template{}, fail(op, err, "")
	}
	old, err := collect(ctx, tx, scanTemplate, `SELECT `+templateColumns+templateFrom+` WHERE t.author_id = ? AND t.name = ?`, authorID, tpl.Name)
	if err != nil {
		return Template{}, fail(op, err, "")
	}
	if len(old) > 0 {
		tpl.Runtime = tpl.Runtime.FillSecrets(old[0].Runtime)
	}
	tpl.Runtime.TemplateID = 0 // a template is not taken from another
	doc, err := market.EncodeRuntimeStored(tpl.Runtime)
	if err != nil {
		return Template{}, fail(op, err, "")
	}
	var id int64
	if err := tx.QueryRowContext(ctx, `INSERT INTO runtime_templates (author_id, name, description, public, runtime_json, used_by, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, 0, ?, ?)
		ON CONFLICT (author_id, name) DO UPDATE SET description = excluded.description, public = excluded.public,
			runtime_json = excluded.runtime_json, updated_at = excluded.updated_at
		RETURNING id`, authorID, tpl.Name, tpl.Description, boolInt(tpl.Public), string(doc), unix(now), unix(now)).Scan(&id); err != nil {
		return Template{}, fail(op, err, "")
	}
	t, err := scanTemplate(tx.QueryRowContext(ctx, `SELECT `+templateColumns+templateFrom+` WHERE t.id = ?`, id))
	if err != nil {
		return Template{}, fail(op, err, "")
	}
	t.Runtime = t.Runtime.WithoutSecrets()
	return t, fail(op, tx.Commit(), "")
}

// ListTemplates returns the templates a user may use: every public one and
// their own private ones, most used first, then by name as lists shown to
// people are ordered (compareNames: the same on both engines, which an
// ORDER BY on the name would not be), secrets' values removed.
func (db *DB) ListTemplates(ctx context.Context, userID int64) ([]Template, error) {
	const op = "list templates"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	out, err := collect(ctx, tx, scanTemplate, `SELECT `+templateColumns+templateFrom+`
		WHERE t.public = 1 OR t.author_id = ?`, userID)
	slices.SortFunc(out, func(a, b Template) int {
		if c := cmp.Compare(b.UsedBy, a.UsedBy); c != 0 {
			return c
		}
		return compareNames(a.Name, a.ID, b.Name, b.ID)
	})
	for i := range out {
		out[i].Runtime = out[i].Runtime.WithoutSecrets()
	}
	return out, fail(op, err, "")
}

// FindTemplateForUse returns a template a user may use (public, or their
// own) with its runtime: secrets' values only for its author (a public
// template's secrets stay its author's). Another user's private template
// is not found.
func (db *DB) FindTemplateForUse(ctx context.Context, userID, id int64) (Template, error) {
	const op = "find template"
	tx, err := db.read(ctx)
	if err != nil {
		return Template{}, fail(op, err, "")
	}
	defer tx.Rollback()
	ts, err := collect(ctx, tx, scanTemplate, `SELECT `+templateColumns+templateFrom+` WHERE t.id = ? AND (t.public = 1 OR t.author_id = ?)`, id, userID)
	if err != nil {
		return Template{}, fail(op, err, "")
	}
	if len(ts) == 0 {
		return Template{}, notFound(msgTemplateNotFound)
	}
	t := ts[0]
	if t.AuthorID != userID {
		t.Runtime = t.Runtime.WithoutSecrets()
	}
	return t, nil
}

// DeleteTemplate deletes an author's template; another user's is not
// found. Reservations booked with it keep their runtime.
func (db *DB) DeleteTemplate(ctx context.Context, authorID, id int64) error {
	const op = "delete template"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `DELETE FROM runtime_templates WHERE id = ? AND author_id = ?`, id, authorID)
	if err != nil {
		return fail(op, err, "")
	}
	if n, err := res.RowsAffected(); err != nil {
		return fail(op, err, "")
	} else if n == 0 {
		return notFound(msgTemplateNotFound)
	}
	return fail(op, tx.Commit(), "")
}

// UpdateTemplate replaces an author's template id with tpl (checked by
// market.ValidateTemplate), keeping its creation time and use count; a
// secret sent without a value keeps the value it had. Another user's
// template is not found; a name the author uses for another template is a
// conflict (the name field). Reservations booked with it keep the runtime
// they were booked with.
func (db *DB) UpdateTemplate(ctx context.Context, authorID, id int64, tpl market.Template, now time.Time) (Template, error) {
	const op = "update template"
	if err := market.ValidateTemplate(&tpl); err != nil {
		return Template{}, err
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return Template{}, fail(op, err, "")
	}
	defer tx.Rollback()
	old, err := collect(ctx, tx, scanTemplate, `SELECT `+templateColumns+templateFrom+` WHERE t.id = ? AND t.author_id = ?`, id, authorID)
	if err != nil {
		return Template{}, fail(op, err, "")
	}
	if len(old) == 0 {
		return Template{}, notFound(msgTemplateNotFound)
	}
	var other int64
	err = tx.QueryRowContext(ctx, `SELECT id FROM runtime_templates WHERE author_id = ? AND name = ? AND id <> ?`, authorID, tpl.Name, id).Scan(&other)
	if err == nil {
		return Template{}, &market.Error{Code: market.CodeInvalid, Message: "Please correct the highlighted fields.",
			Fields: map[string]string{"name": "You have another template of that name; choose another name."}}
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return Template{}, fail(op, err, "")
	}
	tpl.Runtime = tpl.Runtime.FillSecrets(old[0].Runtime)
	tpl.Runtime.TemplateID = 0
	doc, err := market.EncodeRuntimeStored(tpl.Runtime)
	if err != nil {
		return Template{}, fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE runtime_templates SET name = ?, description = ?, public = ?, runtime_json = ?, updated_at = ?
		WHERE id = ? AND author_id = ?`, tpl.Name, tpl.Description, boolInt(tpl.Public), string(doc), unix(now), id, authorID); err != nil {
		return Template{}, fail(op, err, "You have another template of that name; choose another name.")
	}
	t, err := scanTemplate(tx.QueryRowContext(ctx, `SELECT `+templateColumns+templateFrom+` WHERE t.id = ?`, id))
	if err != nil {
		return Template{}, fail(op, err, "")
	}
	t.Runtime = t.Runtime.WithoutSecrets()
	return t, fail(op, tx.Commit(), "")
}

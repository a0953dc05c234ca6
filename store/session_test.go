package store

import (
	"context"
	"encoding/base64"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

func TestSessionLifecycle(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	u := createUser(t, db, "s@example.com", false)

	s, err := db.CreateSession(ctx, u.ID, t0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if raw, err := base64.RawURLEncoding.DecodeString(s.ID); err != nil || len(raw) != 32 {
		t.Errorf("session id %q is not 32 bytes of base64url", s.ID)
	}
	if s.CSRFToken == "" || s.CSRFToken == s.ID || s.UserID != u.ID || !s.CreatedAt.Equal(t0) || !s.ExpiresAt.Equal(t0.Add(time.Hour)) {
		t.Errorf("CreateSession = %+v", s)
	}

	// Only the hash is stored.
	var stored string
	if err := db.reader.QueryRowContext(ctx, `SELECT id_hash FROM sessions`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored == s.ID || stored != hashSessionID(s.ID) {
		t.Errorf("stored id %q; want the SHA-256 hex of the raw id", stored)
	}

	got, gu, err := db.FindSession(ctx, s.ID, t0.Add(59*time.Minute))
	if err != nil || got != s || gu.ID != u.ID || gu.Email != u.Email {
		t.Errorf("FindSession = %+v, %+v, %v; want %+v", got, gu, err, s)
	}
	_, _, err = db.FindSession(ctx, s.ID, t0.Add(time.Hour))
	wantCode(t, err, market.CodeNotFound)
	_, _, err = db.FindSession(ctx, "not-a-session", t0)
	wantCode(t, err, market.CodeNotFound)
	_, _, err = db.FindSession(ctx, "", t0)
	wantCode(t, err, market.CodeNotFound)

	live, err := db.CreateSession(ctx, u.ID, t0, 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	n, err := db.DeleteExpiredSessions(ctx, t0.Add(time.Hour))
	if err != nil || n != 1 {
		t.Errorf("DeleteExpiredSessions = %d, %v; want 1", n, err)
	}
	if _, _, err := db.FindSession(ctx, live.ID, t0.Add(time.Hour)); err != nil {
		t.Errorf("live session gone after pruning: %v", err)
	}
	if err := db.DeleteSession(ctx, live.ID); err != nil {
		t.Fatal(err)
	}
	_, _, err = db.FindSession(ctx, live.ID, t0)
	wantCode(t, err, market.CodeNotFound)
	if err := db.DeleteSession(ctx, live.ID); err != nil {
		t.Errorf("deleting a deleted session: %v", err)
	}

	_, err = db.CreateSession(ctx, u.ID+100, t0, time.Hour)
	wantCode(t, err, market.CodeNotFound)
}

func TestPasswordChangeEndsOtherSessions(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	u := createUser(t, db, "p@example.com", false)
	other := createUser(t, db, "other@example.com", false)

	keep, _ := db.CreateSession(ctx, u.ID, t0, time.Hour)
	drop1, _ := db.CreateSession(ctx, u.ID, t0, time.Hour)
	drop2, _ := db.CreateSession(ctx, u.ID, t0, time.Hour)
	others, _ := db.CreateSession(ctx, other.ID, t0, time.Hour)

	if _, err := db.UpdatePassword(ctx, u.ID, []byte("new"), keep.ID, false, t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.FindSession(ctx, keep.ID, t0); err != nil {
		t.Errorf("kept session ended: %v", err)
	}
	for _, s := range []Session{drop1, drop2} {
		_, _, err := db.FindSession(ctx, s.ID, t0)
		wantCode(t, err, market.CodeNotFound)
	}
	if _, _, err := db.FindSession(ctx, others.ID, t0); err != nil {
		t.Errorf("another user's session ended: %v", err)
	}
}

func TestSuspensionEndsSessions(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	u := createUser(t, db, "x@example.com", true)
	s1, _ := db.CreateSession(ctx, u.ID, t0, time.Hour)
	s2, _ := db.CreateSession(ctx, u.ID, t0, time.Hour)

	suspend(t, db, u.ID)
	for _, s := range []Session{s1, s2} {
		_, _, err := db.FindSession(ctx, s.ID, t0)
		wantCode(t, err, market.CodeNotFound)
	}
	_, err := db.CreateSession(ctx, u.ID, t0, time.Hour)
	wantCode(t, err, market.CodeForbidden)

	reinstate(t, db, u.ID)
	s3, err := db.CreateSession(ctx, u.ID, t0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, gu, err := db.FindSession(ctx, s3.ID, t0); err != nil || gu.Suspended {
		t.Errorf("session after reinstatement: %+v, %v", gu, err)
	}

	// A session row left behind for a suspended user (e.g. suspended by
	// hand in the database) is still refused.
	if _, err := db.writer.ExecContext(ctx, `UPDATE users SET suspended = 1 WHERE id = ?`, u.ID); err != nil {
		t.Fatal(err)
	}
	_, _, err = db.FindSession(ctx, s3.ID, t0)
	wantCode(t, err, market.CodeNotFound)
}

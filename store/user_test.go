package store

import (
	"context"
	"testing"

	"github.com/gpumarket/gpumarket/market"
)

func TestCreateAndFindUser(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	in := market.User{Email: "  Ada@Example.COM ", DisplayName: "Ada", Organisation: "Engines Ltd", IsBuyer: true, IsProvider: true}
	u, err := db.CreateUser(ctx, in, []byte("$2a$10$hash"), t0.Add(500_000_000))
	if err != nil {
		t.Fatal(err)
	}
	// Made by the operator, the demo or a test: the address counts as
	// confirmed from the start.
	want := market.User{ID: u.ID, Email: "ada@example.com", DisplayName: "Ada", Organisation: "Engines Ltd",
		IsBuyer: true, IsProvider: true, CreatedAt: t0, EmailVerifiedAt: t0}
	if u.ID == 0 || u != want {
		t.Fatalf("CreateUser = %+v, want %+v", u, want)
	}

	byID, err := db.FindUserByID(ctx, u.ID)
	if err != nil || byID != want {
		t.Errorf("FindUserByID = %+v, %v; want %+v", byID, err, want)
	}
	byEmail, hash, err := db.FindUserByEmail(ctx, "ADA@example.com ")
	if err != nil || byEmail != want || string(hash) != "$2a$10$hash" {
		t.Errorf("FindUserByEmail = %+v, %q, %v", byEmail, hash, err)
	}

	_, err = db.CreateUser(ctx, market.User{Email: "ada@example.com", DisplayName: "Other"}, []byte("x"), t0)
	wantCode(t, err, market.CodeConflict)
	if msg := market.ErrorMessage(err); msg != "An account with this email already exists." {
		t.Errorf("conflict message = %q", msg)
	}
	if n, err := db.CountUsers(ctx); err != nil || n != 1 {
		t.Errorf("CountUsers = %d, %v; want 1", n, err)
	}

	_, err = db.FindUserByID(ctx, u.ID+100)
	wantCode(t, err, market.CodeNotFound)
	_, _, err = db.FindUserByEmail(ctx, "nobody@example.com")
	wantCode(t, err, market.CodeNotFound)
}

func TestUserUpdates(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	u := createUser(t, db, "b@example.com", false)

	if err := db.SetUserRoles(ctx, u.ID, false, true); err != nil {
		t.Fatal(err)
	}
	if err := db.SetUserAdmin(ctx, u.ID, true); err != nil {
		t.Fatal(err)
	}
	if _, err := db.UpdatePassword(ctx, u.ID, []byte("new-hash"), "", false, t0); err != nil {
		t.Fatal(err)
	}
	got, hash, err := db.FindUserByEmail(ctx, u.Email)
	if err != nil {
		t.Fatal(err)
	}
	if got.IsBuyer || !got.IsProvider || !got.IsAdmin || got.Suspended || string(hash) != "new-hash" {
		t.Errorf("after updates: %+v hash %q", got, hash)
	}

	missing := u.ID + 100
	wantCode(t, db.SetUserRoles(ctx, missing, true, true), market.CodeNotFound)
	wantCode(t, db.SetUserAdmin(ctx, missing, true), market.CodeNotFound)
	_, err = db.UpdatePassword(ctx, missing, []byte("x"), "", true, t0)
	wantCode(t, err, market.CodeNotFound)
}

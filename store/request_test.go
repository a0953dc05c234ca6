package store

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

func TestSavedRequests(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	buyer := createUser(t, db, "buyer@example.com", false)
	other := createUser(t, db, "other@example.com", false)

	a, err := db.SaveRequest(ctx, buyer.ID, "  Llama fine-tune ", `{"version":1,"a":1}`, t0)
	if err != nil {
		t.Fatal(err)
	}
	want := SavedRequest{ID: a.ID, BuyerID: buyer.ID, Name: "Llama fine-tune", JSON: `{"version":1,"a":1}`, CreatedAt: t0, UpdatedAt: t0}
	if a.ID == 0 || a != want {
		t.Fatalf("SaveRequest = %+v, want %+v", a, want)
	}
	b, err := db.SaveRequest(ctx, buyer.ID, "Nightly eval", `{"version":1,"b":1}`, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// The same name overwrites, keeping the id and creation time.
	a2, err := db.SaveRequest(ctx, buyer.ID, "Llama fine-tune", `{"version":1,"a":2}`, t0.Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want.JSON, want.UpdatedAt = `{"version":1,"a":2}`, t0.Add(2*time.Minute)
	if a2 != want {
		t.Errorf("overwrite = %+v, want %+v", a2, want)
	}
	// Another buyer may use the same name.
	o, err := db.SaveRequest(ctx, other.ID, "Llama fine-tune", `{"version":1}`, t0)
	if err != nil || o.ID == a.ID {
		t.Fatalf("other buyer's save = %+v, %v", o, err)
	}

	list, err := db.ListSavedRequests(ctx, buyer.ID)
	if err != nil || !reflect.DeepEqual(list, []SavedRequest{a2, b}) {
		t.Errorf("ListSavedRequests = %+v, %v; want most recently saved first", list, err)
	}
	got, err := db.FindSavedRequest(ctx, buyer.ID, b.ID)
	if err != nil || got != b {
		t.Errorf("FindSavedRequest = %+v, %v", got, err)
	}
	_, err = db.FindSavedRequest(ctx, other.ID, b.ID)
	wantCode(t, err, market.CodeNotFound)
	wantCode(t, db.DeleteSavedRequest(ctx, other.ID, b.ID), market.CodeNotFound)
	if err := db.DeleteSavedRequest(ctx, buyer.ID, b.ID); err != nil {
		t.Fatal(err)
	}
	_, err = db.FindSavedRequest(ctx, buyer.ID, b.ID)
	wantCode(t, err, market.CodeNotFound)
	wantCode(t, db.DeleteSavedRequest(ctx, buyer.ID, b.ID), market.CodeNotFound)

	for _, c := range []struct{ name, json, field string }{
		{"", "{}", "name"},
		{"   ", "{}", "name"},
		{strings.Repeat("é", 81), "{}", "name"},
		{"ok", " ", "json"},
	} {
		_, err := db.SaveRequest(ctx, buyer.ID, c.name, c.json, t0)
		wantCode(t, err, market.CodeInvalid)
		if f := market.FieldErrors(err); f[c.field] == "" || len(f) != 1 {
			t.Errorf("SaveRequest(%q, %q) fields = %v; want only %s", c.name, c.json, f, c.field)
		}
	}
	if _, err := db.SaveRequest(ctx, buyer.ID, strings.Repeat("é", 80), "{}", t0); err != nil {
		t.Errorf("an 80-character name was refused: %v", err)
	}
}

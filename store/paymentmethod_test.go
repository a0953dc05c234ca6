package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

func TestPaymentMethods(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	ada, bob := createUser(t, db, "ada@example.com", false), createUser(t, db, "bob@example.com", false)

	_, err := db.DefaultPaymentMethod(ctx, ada.ID)
	wantCode(t, err, market.CodeNotFound)
	_, err = db.FindPaymentCustomer(ctx, ada.ID)
	wantCode(t, err, market.CodeNotFound)
	if ms, err := db.ListPaymentMethods(ctx, ada.ID); err != nil || len(ms) != 0 {
		t.Fatalf("list before saving: %v, %v", ms, err)
	}

	visa, err := db.SavePaymentMethod(ctx, ada.ID, market.PaymentMethod{Customer: "cus_a", ProcessorMethodID: "pm_visa", Label: "Visa •••• 4242"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	want := market.PaymentMethod{ID: visa.ID, UserID: ada.ID, Customer: "cus_a", ProcessorMethodID: "pm_visa", Label: "Visa •••• 4242", CreatedAt: t0}
	if visa != want || visa.ID == 0 {
		t.Fatalf("saved %+v, want %+v", visa, want)
	}
	// Saving the same card again (the return link followed twice) keeps one.
	again, err := db.SavePaymentMethod(ctx, ada.ID, market.PaymentMethod{Customer: "cus_a", ProcessorMethodID: "pm_visa", Label: "Visa •••• 4242"}, t0.Add(time.Minute))
	if err != nil || again != visa {
		t.Fatalf("saved again %+v, %v; want %+v", again, err, visa)
	}
	mc, err := db.SavePaymentMethod(ctx, ada.ID, market.PaymentMethod{Customer: "cus_a", ProcessorMethodID: "pm_mc", Label: "Mastercard •••• 4444"}, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// Bob's card, saved later, changes nothing of Ada's.
	if _, err := db.SavePaymentMethod(ctx, bob.ID, market.PaymentMethod{Customer: "cus_b", ProcessorMethodID: "pm_b", Label: "Visa •••• 1881"}, t0.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	def, err := db.DefaultPaymentMethod(ctx, ada.ID)
	if err != nil || def != mc {
		t.Fatalf("default %+v, %v; want the most recent, %+v", def, err, mc)
	}
	ms, err := db.ListPaymentMethods(ctx, ada.ID)
	if err != nil || len(ms) != 2 || ms[0] != mc || ms[1] != visa {
		t.Fatalf("list %+v, %v; want Mastercard then Visa", ms, err)
	}

	// Only the owner removes a card; a removed card is not found again.
	wantCode(t, db.RemovePaymentMethod(ctx, bob.ID, mc.ID, t0.Add(3*time.Hour)), market.CodeNotFound)
	if err := db.RemovePaymentMethod(ctx, ada.ID, mc.ID, t0.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	wantCode(t, db.RemovePaymentMethod(ctx, ada.ID, mc.ID, t0.Add(3*time.Hour)), market.CodeNotFound)
	if def, err := db.DefaultPaymentMethod(ctx, ada.ID); err != nil || def != visa {
		t.Fatalf("default after removing the Mastercard %+v, %v; want the Visa", def, err)
	}
	if err := db.RemovePaymentMethod(ctx, ada.ID, visa.ID, t0.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	_, err = db.DefaultPaymentMethod(ctx, ada.ID)
	wantCode(t, err, market.CodeNotFound)
	// The customer outlives the cards: the next card goes to it.
	if c, err := db.FindPaymentCustomer(ctx, ada.ID); err != nil || c != "cus_a" {
		t.Fatalf("customer after removing every card %q, %v", c, err)
	}
	// A removed card saved again is back, as the newest.
	back, err := db.SavePaymentMethod(ctx, ada.ID, market.PaymentMethod{Customer: "cus_a", ProcessorMethodID: "pm_mc", Label: "Mastercard •••• 4444"}, t0.Add(4*time.Hour))
	if err != nil || back.ID != mc.ID || !back.CreatedAt.Equal(t0.Add(4*time.Hour)) {
		t.Fatalf("saved again after removal %+v, %v", back, err)
	}
	if def, err := db.DefaultPaymentMethod(ctx, ada.ID); err != nil || def != back {
		t.Fatalf("default %+v, %v; want %+v", def, err, back)
	}
	if ms, _ := db.ListPaymentMethods(ctx, bob.ID); len(ms) != 1 || ms[0].Customer != "cus_b" {
		t.Fatalf("Bob's cards %+v", ms)
	}
}

func TestPaymentMethodsLimit(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	u := createUser(t, db, "many@example.com", false)
	for i := range market.MaxPaymentMethods {
		if _, err := db.SavePaymentMethod(ctx, u.ID, market.PaymentMethod{Customer: "cus_m", ProcessorMethodID: fmt.Sprintf("pm_%d", i), Label: "Card"}, t0); err != nil {
			t.Fatal(err)
		}
	}
	_, err := db.SavePaymentMethod(ctx, u.ID, market.PaymentMethod{Customer: "cus_m", ProcessorMethodID: "pm_extra", Label: "Card"}, t0)
	wantCode(t, err, market.CodeInvalid)
	_, err = db.SavePaymentMethod(ctx, u.ID, market.PaymentMethod{Customer: "cus_m", ProcessorMethodID: "pm_bad", Label: "Visa\x00"}, t0)
	wantCode(t, err, market.CodeInvalid)
	if _, err := db.SavePaymentMethod(ctx, u.ID, market.PaymentMethod{ProcessorMethodID: "pm_x"}, t0); err == nil {
		t.Error("a card without its customer was saved")
	}
}

package store_test

// An external test: it runs billing.Local over the real SQLite store, which
// store itself never imports (the store only keeps what billing hands it).

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

var _ billing.LocalStore = (*store.DB)(nil)

func openAt(t *testing.T, path string) *store.DB {
	t.Helper()
	db, err := store.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestLocalObjects(t *testing.T) {
	path := filepath.Join(t.TempDir(), "local.db")
	db := openAt(t, path)
	ctx := context.Background()

	got, err := db.CreateLocalObject(ctx, "refund", "local_re_1", "res_1_refund", "local_pi_1", 600, []byte(`{"a":1}`))
	if err != nil || string(got) != `{"a":1}` {
		t.Fatalf("create: %s, %v", got, err)
	}
	// The same id again keeps and returns the first object.
	if got, err := db.CreateLocalObject(ctx, "refund", "local_re_1", "res_1_refund", "local_pi_1", 700, []byte(`{"a":2}`)); err != nil || string(got) != `{"a":1}` {
		t.Errorf("create again: %s, %v", got, err)
	}
	// Ids are unique per kind; keys too.
	if got, err := db.CreateLocalObject(ctx, "transfer", "local_re_1", "res_1_transfer", "local_acct_1", 50, []byte(`{"t":1}`)); err != nil || string(got) != `{"t":1}` {
		t.Errorf("same id, other kind: %s, %v", got, err)
	}
	if _, err := db.CreateLocalObject(ctx, "refund", "local_re_2", "res_1_refund", "local_pi_1", 1, []byte(`{}`)); market.ErrorCode(err) != market.CodeConflict {
		t.Errorf("a key reused under another id: %v", err)
	}
	if _, err := db.CreateLocalObject(ctx, "refund", "local_re_3", "res_1_refund_rest", "local_pi_1", 250, []byte(`{"a":3}`)); err != nil {
		t.Fatal(err)
	}
	// Objects stored from their id alone share the empty key.
	for _, id := range []string{"local_acct_a", "local_acct_b"} {
		if _, err := db.CreateLocalObject(ctx, "account", id, "", "", 0, []byte(`{}`)); err != nil {
			t.Errorf("keyless %s: %v", id, err)
		}
	}

	if err := db.UpdateLocalObject(ctx, "refund", "local_re_3", []byte(`{"a":4}`)); err != nil {
		t.Fatal(err)
	}
	if err := db.UpdateLocalObject(ctx, "refund", "local_re_9", []byte(`{}`)); market.ErrorCode(err) != market.CodeNotFound {
		t.Errorf("update of a missing object: %v", err)
	}
	if _, err := db.FindLocalObject(ctx, "payment", "local_re_1"); market.ErrorCode(err) != market.CodeNotFound {
		t.Errorf("find under another kind: %v", err)
	}

	// After a restart everything reads as before.
	db.Close()
	db = openAt(t, path)
	if got, err := db.FindLocalObject(ctx, "refund", "local_re_1"); err != nil || string(got) != `{"a":1}` {
		t.Errorf("after restart: %s, %v", got, err)
	}
	if got, err := db.FindLocalObject(ctx, "refund", "local_re_3"); err != nil || string(got) != `{"a":4}` {
		t.Errorf("updated, after restart: %s, %v", got, err)
	}
	if sum, err := db.SumLocalAmounts(ctx, "refund", "local_pi_1"); err != nil || sum != 600+250 {
		t.Errorf("refunded of local_pi_1: %s, %v", sum, err)
	}
	if sum, err := db.SumLocalAmounts(ctx, "refund", "local_pi_none"); err != nil || sum != 0 {
		t.Errorf("refunded of a payment without refunds: %s, %v", sum, err)
	}
	if got, err := db.CreateLocalObject(ctx, "refund", "local_re_1", "res_1_refund", "local_pi_1", 600, []byte(`{"a":5}`)); err != nil || string(got) != `{"a":1}` {
		t.Errorf("create again after restart: %s, %v", got, err)
	}
}

// The local test processor over the real database: its payment, refund,
// transfer and account survive a restart, and each idempotency key still
// returns the object it made.
func TestLocalProcessorSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "local.db")
	ctx := context.Background()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	const amount, refund, payout = market.Cents(88199), market.Cents(22049), market.Cents(59535)

	l := billing.NewLocal(billing.LocalConfig{Store: openAt(t, path)})
	in := billing.CheckoutInput{ReservationID: 31, Amount: amount, Description: "Reservation #31", SuccessURL: "/reservations/31",
		CancelURL: "/reservations/31", ExpiresAt: now.Add(31 * time.Minute), IdempotencyKey: market.EntryKey(31, "checkout", 0)}
	co, err := l.CreateCheckout(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := l.CompleteCheckout(co.ID, true, now)
	if err != nil {
		t.Fatal(err)
	}
	pi := evs[1].PaymentIntentID
	re, err := l.Refund(ctx, pi, refund, market.EntryKey(31, market.EntryRefund, 0))
	if err != nil {
		t.Fatal(err)
	}
	acct, err := l.CreateConnectedAccount(ctx, "p@example.com", "provider_4_account")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.CompleteOnboarding(acct.ID, now); err != nil {
		t.Fatal(err)
	}
	tr, err := l.Transfer(ctx, acct.ID, payout, market.TransferGroup(31), market.EntryKey(31, market.EntryTransfer, 4))
	if err != nil {
		t.Fatal(err)
	}

	// The restart: a new database handle on the same file, a new processor.
	l = billing.NewLocal(billing.LocalConfig{Store: openAt(t, path)})
	if got, err := l.RetrieveCheckout(ctx, co.ID); err != nil || !got.Paid || got.Status != "complete" || got.PaymentIntentID != pi || got.Amount != amount {
		t.Errorf("checkout %+v, %v", got, err)
	}
	if got, err := l.CheckoutInput(co.ID); err != nil || got.Amount != amount || got.Description != in.Description || !got.ExpiresAt.Equal(in.ExpiresAt) {
		t.Errorf("checkout input %+v, %v", got, err)
	}
	if got, err := l.RetrievePayment(ctx, pi); err != nil || !got.Succeeded || got.AmountReceived != amount || got.ReservationID != 31 || got.TransferGroup != "res_31" {
		t.Errorf("payment %+v, %v", got, err)
	}
	if got, err := l.RetrieveRefund(ctx, re.ID); err != nil || got.Amount != refund || got.PaymentIntentID != pi || got.Status != "succeeded" {
		t.Errorf("refund %+v, %v", got, err)
	}
	if got, err := l.RetrieveTransfer(ctx, tr.ID); err != nil || got.Amount != payout || got.AccountID != acct.ID || got.TransferGroup != "res_31" {
		t.Errorf("transfer %+v, %v", got, err)
	}
	if got, err := l.RetrieveAccount(ctx, acct.ID); err != nil || !got.Onboarded() || got.Email != "p@example.com" {
		t.Errorf("account %+v, %v", got, err)
	}

	// Retries after the restart return the same objects.
	if got, err := l.CreateCheckout(ctx, in); err != nil || got.ID != co.ID || !got.Paid {
		t.Errorf("checkout retried %+v, %v", got, err)
	}
	if got, err := l.Refund(ctx, pi, refund, market.EntryKey(31, market.EntryRefund, 0)); err != nil || got != re {
		t.Errorf("refund retried %+v, %v (was %+v)", got, err, re)
	}
	if got, err := l.Transfer(ctx, acct.ID, payout, market.TransferGroup(31), market.EntryKey(31, market.EntryTransfer, 4)); err != nil || got != tr {
		t.Errorf("transfer retried %+v, %v (was %+v)", got, err, tr)
	}
	if got, err := l.CreateConnectedAccount(ctx, "p@example.com", "provider_4_account"); err != nil || got.ID != acct.ID {
		t.Errorf("account retried %+v, %v", got, err)
	}
	if _, err := l.Transfer(ctx, acct.ID, payout+1, market.TransferGroup(31), market.EntryKey(31, market.EntryTransfer, 4)); market.ErrorCode(err) != market.CodeConflict {
		t.Errorf("transfer key reused with another amount: %v", err)
	}
	// What was refunded before the restart still counts.
	if _, err := l.Refund(ctx, pi, amount-refund+1, "res_31_refund_more"); market.ErrorCode(err) != market.CodeInvalid {
		t.Errorf("refunding more than is left: %v", err)
	}
	if _, err := l.Refund(ctx, pi, amount-refund, "res_31_refund_rest"); err != nil {
		t.Errorf("refunding the rest: %v", err)
	}

	// No webhook is believed, however it is signed.
	obj := map[string]any{"id": pi, "object": "payment_intent", "amount": 1, "metadata": map[string]any{"reservation_id": "31"}}
	for _, secret := range []string{"local_whsec", "whsec_anything"} {
		payload, header := billing.SignTestEvent(secret, "evt_forged", "payment_intent.succeeded", obj, now)
		if _, err := l.ParseWebhook(payload, header); err == nil || !strings.Contains(market.ErrorMessage(err), "local test processor") {
			t.Errorf("webhook signed with %q: %v", secret, err)
		}
	}
}

package billing

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

func TestLocalCheckoutAndPayment(t *testing.T) {
	l := NewLocal(LocalConfig{})
	ctx := context.Background()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	if !l.Simulated() {
		t.Error("the local processor must say it is simulated")
	}
	in := CheckoutInput{ReservationID: 42, Amount: 123456, Description: "Reservation #42", SuccessURL: "/r/42", CancelURL: "/r/42", IdempotencyKey: "res_42_checkout"}
	co, err := l.CreateCheckout(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(co.ID, "local_cs_") || co.URL != "/pay/local/"+co.ID || co.ReservationID != 42 || co.Amount != 123456 || co.Status != "open" || co.Paid {
		t.Errorf("checkout = %+v", co)
	}
	again, err := l.CreateCheckout(ctx, in)
	if err != nil || again != co {
		t.Errorf("same key gave %+v, %v", again, err)
	}
	changed := in
	changed.Amount++
	if _, err := l.CreateCheckout(ctx, changed); market.ErrorCode(err) != market.CodeConflict {
		t.Errorf("key reused with another amount: %v", err)
	}
	if got, err := l.CheckoutInput(co.ID); err != nil || got != in {
		t.Errorf("CheckoutInput = %+v, %v", got, err)
	}

	failed, err := l.CompleteCheckout(co.ID, false, now)
	if err != nil || len(failed) != 1 || failed[0].Type != EventPaymentFailed || failed[0].ReservationID != 42 || failed[0].FailureMessage == "" {
		t.Fatalf("declined: %+v, %v", failed, err)
	}
	evs, err := l.CompleteCheckout(co.ID, true, now)
	if err != nil || len(evs) != 2 {
		t.Fatalf("paid: %+v, %v", evs, err)
	}
	if e := evs[0]; e.Type != EventCheckoutCompleted || e.CheckoutID != co.ID || e.ReservationID != 42 || e.AmountCents != 123456 ||
		!strings.HasPrefix(e.PaymentIntentID, "local_pi_") || e.PaymentStatus != "paid" || e.ID == "" {
		t.Errorf("completed event = %+v", e)
	}
	if e := evs[1]; e.Type != EventPaymentSucceeded || e.PaymentIntentID != evs[0].PaymentIntentID || e.ReservationID != 42 || e.AmountCents != 123456 || e.ID == evs[0].ID {
		t.Errorf("succeeded event = %+v", e)
	}
	if evs2, _ := l.CompleteCheckout(co.ID, true, now.Add(time.Minute)); evs2[0].ID != evs[0].ID || evs2[1].ID != evs[1].ID {
		t.Error("paying twice gave new event ids")
	}
	got, err := l.RetrieveCheckout(ctx, co.ID)
	if err != nil || got.Status != "complete" || !got.Paid || got.PaymentIntentID != evs[0].PaymentIntentID {
		t.Errorf("retrieved %+v, %v", got, err)
	}
	pay, err := l.RetrievePayment(ctx, got.PaymentIntentID)
	if err != nil || !pay.Succeeded || pay.AmountReceived != 123456 || pay.ReservationID != 42 || pay.TransferGroup != "res_42" {
		t.Errorf("payment %+v, %v", pay, err)
	}
	if _, err := l.RetrievePayment(ctx, "local_pi_unknown"); market.ErrorCode(err) != market.CodeNotFound {
		t.Errorf("unknown payment: %v", err)
	}

	other, _ := l.CreateCheckout(ctx, CheckoutInput{ReservationID: 43, Amount: 5, IdempotencyKey: "res_43_checkout"})
	if err := l.ExpireCheckout(other.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := l.CompleteCheckout(other.ID, true, now); market.ErrorCode(err) != market.CodeConflict {
		t.Errorf("paying an expired checkout: %v", err)
	}
}

func TestLocalRefundsAndTransfers(t *testing.T) {
	l := NewLocal(LocalConfig{PayPath: "/x/"})
	ctx := context.Background()
	co, _ := l.CreateCheckout(ctx, CheckoutInput{ReservationID: 7, Amount: 1000, IdempotencyKey: "res_7_checkout"})
	evs, _ := l.CompleteCheckout(co.ID, true, time.Now())
	pi := evs[1].PaymentIntentID

	r, err := l.Refund(ctx, pi, 600, "res_7_refund")
	if err != nil || !strings.HasPrefix(r.ID, "local_re_") || r.Amount != 600 || r.PaymentIntentID != pi || r.Status != "succeeded" {
		t.Fatalf("refund %+v, %v", r, err)
	}
	if r2, err := l.Refund(ctx, pi, 600, "res_7_refund"); err != nil || r2 != r {
		t.Errorf("retried refund %+v, %v", r2, err)
	}
	if _, err := l.Refund(ctx, pi, 601, "res_7_refund"); market.ErrorCode(err) != market.CodeConflict {
		t.Errorf("key reused: %v", err)
	}
	if _, err := l.Refund(ctx, pi, 401, "res_7_refund_more"); market.ErrorCode(err) != market.CodeInvalid {
		t.Errorf("over-refund: %v", err)
	}
	if _, err := l.Refund(ctx, pi, 400, "res_7_refund_rest"); err != nil {
		t.Errorf("refunding the rest: %v", err)
	}
	if got, err := l.RetrieveRefund(ctx, r.ID); err != nil || got != r {
		t.Errorf("retrieved refund %+v, %v", got, err)
	}
	if _, err := l.Refund(ctx, pi, 0, "k"); market.ErrorCode(err) != market.CodeInvalid {
		t.Errorf("zero refund: %v", err)
	}
	if _, err := l.Refund(ctx, pi, 1, ""); err == nil {
		t.Error("refund without a key")
	}
	// A payment forgotten on restart is refunded on trust: no money moves.
	if _, err := l.Refund(ctx, "local_pi_forgotten", 5, "res_8_refund"); err != nil {
		t.Errorf("forgotten payment: %v", err)
	}

	tr, err := l.Transfer(ctx, "local_acct_1", 900, "res_7", "res_7_transfer_p3")
	if err != nil || !strings.HasPrefix(tr.ID, "local_tr_") || tr.AccountID != "local_acct_1" || tr.Amount != 900 || tr.TransferGroup != "res_7" {
		t.Fatalf("transfer %+v, %v", tr, err)
	}
	if tr2, err := l.Transfer(ctx, "local_acct_1", 900, "res_7", "res_7_transfer_p3"); err != nil || tr2 != tr {
		t.Errorf("retried transfer %+v, %v", tr2, err)
	}
	if _, err := l.Transfer(ctx, "local_acct_2", 900, "res_7", "res_7_transfer_p3"); market.ErrorCode(err) != market.CodeConflict {
		t.Errorf("key reused: %v", err)
	}
	if _, err := l.Transfer(ctx, "", 900, "res_7", "k2"); err == nil {
		t.Error("transfer without a destination")
	}
	if got, err := l.RetrieveTransfer(ctx, tr.ID); err != nil || got != tr {
		t.Errorf("retrieved transfer %+v, %v", got, err)
	}
	if _, err := l.RetrieveTransfer(ctx, "local_tr_x"); market.ErrorCode(err) != market.CodeNotFound {
		t.Errorf("unknown transfer: %v", err)
	}
	// Ids depend only on the key: a fresh processor (a restart) gives the same one.
	if tr3, _ := NewLocal(LocalConfig{}).Transfer(ctx, "local_acct_1", 900, "res_7", "res_7_transfer_p3"); tr3.ID != tr.ID {
		t.Errorf("ids are not deterministic: %s, %s", tr3.ID, tr.ID)
	}
}

// Concurrent retries of one step make one refund.
func TestLocalConcurrentRetries(t *testing.T) {
	l := NewLocal(LocalConfig{})
	ctx := context.Background()
	co, _ := l.CreateCheckout(ctx, CheckoutInput{ReservationID: 9, Amount: 100, IdempotencyKey: "res_9_checkout"})
	evs, _ := l.CompleteCheckout(co.ID, true, time.Now())
	var wg sync.WaitGroup
	ids := make([]string, 20)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := l.Refund(ctx, evs[1].PaymentIntentID, 60, "res_9_refund")
			if err != nil {
				t.Error(err)
			}
			ids[i] = r.ID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("different refunds: %v", ids)
		}
	}
	if _, err := l.Refund(ctx, evs[1].PaymentIntentID, 60, "res_9_refund_2"); market.ErrorCode(err) != market.CodeInvalid {
		t.Errorf("a second refund of 60 out of 100: %v", err)
	}
}

func TestLocalAccounts(t *testing.T) {
	l := NewLocal(LocalConfig{})
	ctx := context.Background()
	a, err := l.CreateConnectedAccount(ctx, "p@example.com", "provider_3_account")
	if err != nil || !strings.HasPrefix(a.ID, "local_acct_") || a.Email != "p@example.com" || a.Onboarded() {
		t.Fatalf("account %+v, %v", a, err)
	}
	if a2, _ := l.CreateConnectedAccount(ctx, "p@example.com", "provider_3_account"); a2 != a {
		t.Errorf("retried account %+v", a2)
	}
	if _, err := l.CreateConnectedAccount(ctx, "q@example.com", "provider_3_account"); market.ErrorCode(err) != market.CodeConflict {
		t.Errorf("key reused: %v", err)
	}
	link, err := l.AccountLink(ctx, a.ID, "/provider/refresh", "/provider/return")
	if err != nil || link != "/connect/local/"+a.ID+"?refresh=%2Fprovider%2Frefresh&return=%2Fprovider%2Freturn" {
		t.Errorf("link %q, %v", link, err)
	}
	ev, err := l.CompleteOnboarding(a.ID, time.Now())
	if err != nil || ev.Type != EventAccountUpdated || ev.AccountID != a.ID || !ev.PayoutsEnabled || !ev.ChargesEnabled || !ev.DetailsSubmitted {
		t.Errorf("onboarding event %+v, %v", ev, err)
	}
	if got, _ := l.RetrieveAccount(ctx, a.ID); !got.Onboarded() {
		t.Errorf("account after onboarding %+v", got)
	}
	if got, err := NewLocal(LocalConfig{}).RetrieveAccount(ctx, a.ID); err != nil || got.Onboarded() || got.ID != a.ID {
		t.Errorf("forgotten account %+v, %v", got, err)
	}
	if _, err := l.RetrieveAccount(ctx, "acct_real"); market.ErrorCode(err) != market.CodeNotFound {
		t.Errorf("a non-local account: %v", err)
	}
}

func TestLocalWebhook(t *testing.T) {
	l := NewLocal(LocalConfig{WebhookSecret: "local_secret"})
	obj := map[string]any{"id": "local_pi_1", "object": "payment_intent", "amount": 100, "metadata": map[string]any{"reservation_id": "5"}}
	payload, header := SignTestEvent("local_secret", "evt_l1", "payment_intent.succeeded", obj, time.Now())
	ev, err := l.ParseWebhook(payload, header)
	if err != nil || ev.Type != EventPaymentSucceeded || ev.ReservationID != 5 || ev.PaymentIntentID != "local_pi_1" || ev.AmountCents != 100 {
		t.Errorf("event %+v, %v", ev, err)
	}
	_, wrong := SignTestEvent("whsec_other", "evt_l1", "payment_intent.succeeded", obj, time.Now())
	if _, err := l.ParseWebhook(payload, wrong); market.ErrorCode(err) != market.CodeInvalid {
		t.Errorf("wrong secret: %v", err)
	}
}

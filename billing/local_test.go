package billing

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// testStore is a LocalStore in memory with the store's semantics, so that
// billing's tests need no database; a new Local over the same testStore is
// a restart. store/localprocessor_test.go runs Local over the real SQLite
// store.
type testStore struct {
	mu      sync.Mutex
	objects map[[2]string]testObject // by kind and id
}

type testObject struct {
	key, parent string
	amount      market.Cents
	data        string
}

func newTestStore() *testStore { return &testStore{objects: map[[2]string]testObject{}} }

func (s *testStore) CreateLocalObject(_ context.Context, kind, id, key, parent string, amount market.Cents, data []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o, ok := s.objects[[2]string{kind, id}]; ok {
		return []byte(o.data), nil
	}
	s.objects[[2]string{kind, id}] = testObject{key: key, parent: parent, amount: amount, data: string(data)}
	return data, nil
}

func (s *testStore) UpdateLocalObject(_ context.Context, kind, id string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[[2]string{kind, id}]
	if !ok {
		return market.Errorf(market.CodeNotFound, "not found")
	}
	o.data = string(data)
	s.objects[[2]string{kind, id}] = o
	return nil
}

func (s *testStore) FindLocalObject(_ context.Context, kind, id string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[[2]string{kind, id}]
	if !ok {
		return nil, market.Errorf(market.CodeNotFound, "not found")
	}
	return []byte(o.data), nil
}

func (s *testStore) SumLocalAmounts(_ context.Context, kind, parent string) (market.Cents, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var sum market.Cents
	for k, o := range s.objects {
		if k[0] == kind && o.parent == parent {
			sum += o.amount
		}
	}
	return sum, nil
}

func (s *testStore) ListLocalObjects(_ context.Context, kind string) ([]string, [][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for k := range s.objects {
		if k[0] == kind {
			ids = append(ids, k[1])
		}
	}
	slices.Sort(ids)
	data := make([][]byte, len(ids))
	for i, id := range ids {
		data[i] = []byte(s.objects[[2]string{kind, id}].data)
	}
	return ids, data, nil
}

func newTestLocal() *Local { return NewLocal(LocalConfig{Store: newTestStore()}) }

func TestLocalCheckoutAndPayment(t *testing.T) {
	l := newTestLocal()
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
	if got, _ := l.RetrieveCheckout(ctx, co.ID); got.Status != "open" || got.Paid {
		t.Errorf("a decline completed the checkout: %+v", got)
	}
	evs, err := l.CompleteCheckout(co.ID, true, now)
	if err != nil || len(evs) != 2 {
		t.Fatalf("paid: %+v, %v", evs, err)
	}
	if e := evs[0]; e.Type != EventCheckoutCompleted || e.CheckoutID != co.ID || e.ReservationID != 42 || e.AmountCents != 123456 ||
		!strings.HasPrefix(e.PaymentIntentID, "local_pi_") || e.PaymentStatus != "paid" || e.ID == "" {
		t.Errorf("completed event = %+v", e)
	}
	if e := evs[1]; e.Type != EventPaymentSucceeded || e.PaymentIntentID != evs[0].PaymentIntentID || e.ReservationID != 42 || e.AmountCents != 123456 ||
		!strings.HasPrefix(e.ChargeID, "local_ch_") || e.ID == evs[0].ID {
		t.Errorf("succeeded event = %+v", e)
	}
	if evs2, _ := l.CompleteCheckout(co.ID, true, now.Add(time.Minute)); evs2[0].ID != evs[0].ID || evs2[1].ID != evs[1].ID {
		t.Error("paying twice gave new event ids")
	}
	got, err := l.RetrieveCheckout(ctx, co.ID)
	if err != nil || got.Status != "complete" || !got.Paid || got.PaymentIntentID != evs[0].PaymentIntentID || got.URL != co.URL || got.Amount != 123456 {
		t.Errorf("retrieved %+v, %v", got, err)
	}
	pay, err := l.RetrievePayment(ctx, got.PaymentIntentID)
	if err != nil || !pay.Succeeded || pay.Status != "succeeded" || pay.Amount != 123456 || pay.AmountReceived != 123456 || pay.ReservationID != 42 ||
		pay.TransferGroup != "res_42" || pay.ChargeID != evs[1].ChargeID || pay.ID != got.PaymentIntentID {
		t.Errorf("payment %+v, %v", pay, err)
	}
	if _, err := l.RetrievePayment(ctx, "local_pi_unknown"); market.ErrorCode(err) != market.CodeNotFound {
		t.Errorf("unknown payment: %v", err)
	}
	if _, err := l.RetrieveCheckout(ctx, "local_cs_unknown"); market.ErrorCode(err) != market.CodeNotFound {
		t.Errorf("unknown checkout: %v", err)
	}

	other, _ := l.CreateCheckout(ctx, CheckoutInput{ReservationID: 43, Amount: 5, IdempotencyKey: "res_43_checkout"})
	if err := l.ExpireCheckout(ctx, other.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.RetrieveCheckout(ctx, other.ID); got.Status != "expired" {
		t.Errorf("expired checkout reads %q", got.Status)
	}
	if _, err := l.CompleteCheckout(other.ID, true, now); market.ErrorCode(err) != market.CodeConflict {
		t.Errorf("paying an expired checkout: %v", err)
	}
	if err := l.ExpireCheckout(ctx, co.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.RetrieveCheckout(ctx, co.ID); got.Status != "complete" {
		t.Errorf("expiring a paid checkout made it %q", got.Status)
	}
}

// A checkout's expiry reads back as the same instant, in UTC; the same
// instant in another zone is the same argument, another instant is not.
func TestLocalCheckoutExpiry(t *testing.T) {
	l := newTestLocal()
	ctx := context.Background()
	at := time.Date(2025, 3, 1, 12, 30, 0, 123, time.FixedZone("CET", 3600))
	in := CheckoutInput{ReservationID: 5, Amount: 10, ExpiresAt: at, IdempotencyKey: "res_5_checkout"}
	if _, err := l.CreateCheckout(ctx, in); err != nil {
		t.Fatal(err)
	}
	got, err := l.CheckoutInput(localID("cs", "res_5_checkout"))
	if err != nil || !got.ExpiresAt.Equal(at) || got.ExpiresAt.Location() != time.UTC {
		t.Errorf("expiry %v, %v", got.ExpiresAt, err)
	}
	in.ExpiresAt = at.UTC()
	if _, err := l.CreateCheckout(ctx, in); err != nil {
		t.Errorf("the same instant in UTC: %v", err)
	}
	in.ExpiresAt = at.Add(time.Second)
	if _, err := l.CreateCheckout(ctx, in); market.ErrorCode(err) != market.CodeConflict {
		t.Errorf("another expiry under the same key: %v", err)
	}
}

func TestLocalRefundsAndTransfers(t *testing.T) {
	l := NewLocal(LocalConfig{Store: newTestStore(), PayPath: "/x/"})
	ctx := context.Background()
	co, _ := l.CreateCheckout(ctx, CheckoutInput{ReservationID: 7, Amount: 1000, IdempotencyKey: "res_7_checkout"})
	if !strings.HasPrefix(co.URL, "/x/local_cs_") {
		t.Errorf("pay path not used: %q", co.URL)
	}
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
		t.Errorf("key reused with another amount: %v", err)
	}
	if _, err := l.Refund(ctx, "local_pi_other", 600, "res_7_refund"); market.ErrorCode(err) != market.CodeConflict {
		t.Errorf("key reused for another payment: %v", err)
	}
	if _, err := l.Refund(ctx, pi, 401, "res_7_refund_more"); market.ErrorCode(err) != market.CodeInvalid {
		t.Errorf("over-refund: %v", err)
	}
	if _, err := l.Refund(ctx, pi, 400, "res_7_refund_rest"); err != nil {
		t.Errorf("refunding the rest: %v", err)
	}
	if _, err := l.Refund(ctx, pi, 1, "res_7_refund_beyond"); market.ErrorCode(err) != market.CodeInvalid {
		t.Errorf("refund beyond a fully refunded payment: %v", err)
	}
	if got, err := l.RetrieveRefund(ctx, r.ID); err != nil || got != r {
		t.Errorf("retrieved refund %+v, %v", got, err)
	}
	if _, err := l.RetrieveRefund(ctx, "local_re_x"); market.ErrorCode(err) != market.CodeNotFound {
		t.Errorf("unknown refund: %v", err)
	}
	if _, err := l.Refund(ctx, pi, 0, "k"); market.ErrorCode(err) != market.CodeInvalid {
		t.Errorf("zero refund: %v", err)
	}
	if _, err := l.Refund(ctx, pi, 1, ""); err == nil {
		t.Error("refund without a key")
	}
	// A payment made before the processor kept its objects is refunded on
	// trust: no money moves.
	if r, err := l.Refund(ctx, "local_pi_before", 5, "res_8_refund"); err != nil || r.Amount != 5 {
		t.Errorf("unknown payment: %+v, %v", r, err)
	}

	tr, err := l.Transfer(ctx, "local_acct_1", 900, "res_7", "res_7_transfer_p3")
	if err != nil || !strings.HasPrefix(tr.ID, "local_tr_") || tr.AccountID != "local_acct_1" || tr.Amount != 900 || tr.TransferGroup != "res_7" {
		t.Fatalf("transfer %+v, %v", tr, err)
	}
	if tr2, err := l.Transfer(ctx, "local_acct_1", 900, "res_7", "res_7_transfer_p3"); err != nil || tr2 != tr {
		t.Errorf("retried transfer %+v, %v", tr2, err)
	}
	if _, err := l.Transfer(ctx, "local_acct_2", 900, "res_7", "res_7_transfer_p3"); market.ErrorCode(err) != market.CodeConflict {
		t.Errorf("key reused for another account: %v", err)
	}
	if _, err := l.Transfer(ctx, "local_acct_1", 901, "res_7", "res_7_transfer_p3"); market.ErrorCode(err) != market.CodeConflict {
		t.Errorf("key reused with another amount: %v", err)
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
	// Ids depend only on the key: another processor over another store
	// gives the same one.
	if tr3, _ := newTestLocal().Transfer(ctx, "local_acct_1", 900, "res_7", "res_7_transfer_p3"); tr3.ID != tr.ID {
		t.Errorf("ids are not deterministic: %s, %s", tr3.ID, tr.ID)
	}
}

// Concurrent retries of one step make one refund.
func TestLocalConcurrentRetries(t *testing.T) {
	l := newTestLocal()
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
		if id == "" || id != ids[0] {
			t.Fatalf("different refunds: %v", ids)
		}
	}
	if _, err := l.Refund(ctx, evs[1].PaymentIntentID, 60, "res_9_refund_2"); market.ErrorCode(err) != market.CodeInvalid {
		t.Errorf("a second refund of 60 out of 100: %v", err)
	}
}

func TestLocalAccounts(t *testing.T) {
	st := newTestStore()
	l := NewLocal(LocalConfig{Store: st})
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
	if got, _ := l.RetrieveAccount(ctx, a.ID); !got.Onboarded() || got.Email != "p@example.com" {
		t.Errorf("account after onboarding %+v", got)
	}
	// An account made before the processor kept its objects reads as not
	// onboarded, and onboarding it stores it.
	old := localID("acct", "provider_4_account")
	if got, err := l.RetrieveAccount(ctx, old); err != nil || got.Onboarded() || got.ID != old {
		t.Errorf("unstored account %+v, %v", got, err)
	}
	if _, err := l.CompleteOnboarding(old, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got, _ := NewLocal(LocalConfig{Store: st}).RetrieveAccount(ctx, old); !got.Onboarded() {
		t.Errorf("onboarded unstored account %+v", got)
	}
	if _, err := l.RetrieveAccount(ctx, "acct_real"); market.ErrorCode(err) != market.CodeNotFound {
		t.Errorf("a non-local account: %v", err)
	}
	if _, err := l.CompleteOnboarding("acct_real", time.Now()); market.ErrorCode(err) != market.CodeNotFound {
		t.Errorf("onboarding a non-local account: %v", err)
	}
}

// After a restart (a new Local over the same store) every object reads as
// before, each idempotency key returns the object it made, and what was
// refunded before still counts.
func TestLocalRestart(t *testing.T) {
	st := newTestStore()
	ctx := context.Background()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	before := NewLocal(LocalConfig{Store: st})
	in := CheckoutInput{ReservationID: 11, Amount: 5000, Description: "Reservation #11", IdempotencyKey: "res_11_checkout"}
	co, _ := before.CreateCheckout(ctx, in)
	evs, err := before.CompleteCheckout(co.ID, true, now)
	if err != nil {
		t.Fatal(err)
	}
	pi := evs[1].PaymentIntentID
	pay, _ := before.RetrievePayment(ctx, pi)
	re, err := before.Refund(ctx, pi, 1200, "res_11_refund")
	if err != nil {
		t.Fatal(err)
	}
	acct, _ := before.CreateConnectedAccount(ctx, "p@example.com", "provider_2_account")
	if _, err := before.CompleteOnboarding(acct.ID, now); err != nil {
		t.Fatal(err)
	}
	tr, err := before.Transfer(ctx, acct.ID, 3420, "res_11", "res_11_transfer_p2")
	if err != nil {
		t.Fatal(err)
	}

	after := NewLocal(LocalConfig{Store: st})
	if got, err := after.RetrieveCheckout(ctx, co.ID); err != nil || got.Status != "complete" || !got.Paid || got.PaymentIntentID != pi || got.Amount != 5000 {
		t.Errorf("checkout after restart %+v, %v", got, err)
	}
	if got, err := after.CheckoutInput(co.ID); err != nil || got != in {
		t.Errorf("checkout input after restart %+v, %v", got, err)
	}
	if got, err := after.RetrievePayment(ctx, pi); err != nil || !reflect.DeepEqual(got, pay) || got.AmountReceived != 5000 {
		t.Errorf("payment after restart %+v, %v (was %+v)", got, err, pay)
	}
	if got, err := after.RetrieveRefund(ctx, re.ID); err != nil || got != re || got.Amount != 1200 {
		t.Errorf("refund after restart %+v, %v", got, err)
	}
	if got, err := after.RetrieveTransfer(ctx, tr.ID); err != nil || got != tr || got.Amount != 3420 || got.AccountID != acct.ID {
		t.Errorf("transfer after restart %+v, %v", got, err)
	}
	if got, err := after.RetrieveAccount(ctx, acct.ID); err != nil || !got.Onboarded() || got.Email != "p@example.com" {
		t.Errorf("account after restart %+v, %v", got, err)
	}

	if got, err := after.CreateCheckout(ctx, in); err != nil || got.ID != co.ID || got.Status != "complete" {
		t.Errorf("checkout key after restart %+v, %v", got, err)
	}
	if again, err := after.CompleteCheckout(co.ID, true, now.Add(time.Hour)); err != nil || again[0].ID != evs[0].ID || again[1].ID != evs[1].ID || again[1].ChargeID != evs[1].ChargeID {
		t.Errorf("paying again after restart %+v, %v", again, err)
	}
	if got, err := after.Refund(ctx, pi, 1200, "res_11_refund"); err != nil || got != re {
		t.Errorf("refund key after restart %+v, %v", got, err)
	}
	if _, err := after.Refund(ctx, pi, 1300, "res_11_refund"); market.ErrorCode(err) != market.CodeConflict {
		t.Errorf("refund key reused with another amount after restart: %v", err)
	}
	if _, err := after.Refund(ctx, pi, 3801, "res_11_refund_more"); market.ErrorCode(err) != market.CodeInvalid {
		t.Errorf("refunding more than is left after restart: %v", err)
	}
	if got, err := after.Transfer(ctx, acct.ID, 3420, "res_11", "res_11_transfer_p2"); err != nil || got != tr {
		t.Errorf("transfer key after restart %+v, %v", got, err)
	}
	if got, err := after.CreateConnectedAccount(ctx, "p@example.com", "provider_2_account"); err != nil || got.ID != acct.ID || !got.Onboarded() {
		t.Errorf("account key after restart %+v, %v", got, err)
	}
}

// Without a store every call fails rather than keep objects it would lose.
func TestLocalWithoutStore(t *testing.T) {
	l := NewLocal(LocalConfig{})
	ctx := context.Background()
	if _, err := l.CreateCheckout(ctx, CheckoutInput{ReservationID: 1, Amount: 1, IdempotencyKey: "k"}); !errors.Is(err, errNoLocalStore) {
		t.Errorf("checkout without a store: %v", err)
	}
	if _, err := l.Refund(ctx, "local_pi_1", 1, "k"); !errors.Is(err, errNoLocalStore) {
		t.Errorf("refund without a store: %v", err)
	}
	if _, err := l.Transfer(ctx, "local_acct_1", 1, "res_1", "k"); !errors.Is(err, errNoLocalStore) {
		t.Errorf("transfer without a store: %v", err)
	}
}

// The local processor believes no webhook, however it is signed: its
// events are applied inside the process.
func TestLocalRefusesWebhooks(t *testing.T) {
	l := newTestLocal()
	obj := map[string]any{"id": "local_pi_1", "object": "payment_intent", "amount": 1, "metadata": map[string]any{"reservation_id": "5"}}
	for _, secret := range []string{"local_whsec", "local_secret", "whsec_test", ""} {
		payload, header := SignTestEvent(secret, "evt_l1", "payment_intent.succeeded", obj, time.Now())
		ev, err := l.ParseWebhook(payload, header)
		if !errors.Is(err, ErrLocalWebhook) || market.ErrorCode(err) != market.CodeInvalid || ev != (Event{}) {
			t.Errorf("signed with %q: %+v, %v", secret, ev, err)
		}
	}
	if _, err := l.ParseWebhook([]byte(`{"id":"evt_x","type":"account.updated"}`), ""); !errors.Is(err, ErrLocalWebhook) {
		t.Errorf("unsigned: %v", err)
	}
	if msg := market.ErrorMessage(ErrLocalWebhook); !strings.Contains(msg, "local test processor") || !strings.Contains(msg, "accepts no webhook events") {
		t.Errorf("message %q", msg)
	}
}

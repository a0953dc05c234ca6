package workflow

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// chargeLog wraps the local processor and keeps the payment (or declined
// intent) of every off-session charge that reached it.
type chargeLog struct {
	*billing.Local
	mu       sync.Mutex
	payments []string
	// gate, when set, holds every charge until gateN calls have arrived
	// (or a second has passed), so concurrent presses all reach the
	// processor before any is recorded.
	gate    chan struct{}
	gateN   int
	arrived int
}

func (c *chargeLog) ChargeSaved(ctx context.Context, in billing.ChargeInput) (billing.Payment, error) {
	if c.gate != nil {
		c.mu.Lock()
		if c.arrived++; c.arrived == c.gateN {
			close(c.gate)
		}
		c.mu.Unlock()
		select {
		case <-c.gate:
		case <-time.After(time.Second):
		}
	}
	p, err := c.Local.ChargeSaved(ctx, in)
	c.mu.Lock()
	defer c.mu.Unlock()
	if d, ok := billing.AsDecline(err); ok {
		c.payments = append(c.payments, d.PaymentIntentID)
	} else if err == nil {
		c.payments = append(c.payments, p.ID)
	}
	return p, err
}

// distinct is how many different payments the charges made.
func (c *chargeLog) distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[string]bool{}
	for _, p := range c.payments {
		seen[p] = true
	}
	return len(seen)
}

// saveCard saves a test card for the user as the account page does: a
// setup on the local processor, the card chosen, the result stored.
func (f *fixture) saveCard(userID int64, number string) market.PaymentMethod {
	f.t.Helper()
	co, err := f.proc.CreateSetupCheckout(f.ctx, billing.SetupInput{UserID: userID, SuccessURL: "/back", CancelURL: "/account"})
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.local.CompleteSetup(co.ID, number); err != nil {
		f.t.Fatal(err)
	}
	sm, err := f.proc.RetrieveSetup(f.ctx, co.ID)
	if err != nil {
		f.t.Fatal(err)
	}
	m, err := f.db.SavePaymentMethod(f.ctx, userID, market.PaymentMethod{Customer: sm.Customer, ProcessorMethodID: sm.PaymentMethodID, Label: sm.Label}, f.now)
	if err != nil {
		f.t.Fatal(err)
	}
	f.now = f.now.Add(time.Second) // the next card saved is the newer
	return m
}

func (f *fixture) countNotified(userID int64, contains string) int {
	f.t.Helper()
	ns, err := f.db.ListNotifications(f.ctx, userID, 100)
	if err != nil {
		f.t.Fatal(err)
	}
	n := 0
	for _, x := range ns {
		if strings.Contains(x.Notice.Text(), contains) {
			n++
		}
	}
	return n
}

func (f *fixture) state(id int64) market.ReservationState {
	f.t.Helper()
	r, err := f.db.FindReservation(f.ctx, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return r.State
}

// Figures by hand: 8 devices × 10 h × 249¢ = 19,920¢ charged.
func TestPayWithSavedMethod(t *testing.T) {
	cl := &chargeLog{}
	f := newFixture(t, func(l *billing.Local) billing.Processor { cl.Local = l; return cl })
	r := f.book(t0.Add(48 * time.Hour))

	// No card: say where to add one; nothing charged.
	_, err := f.wf.PayWithSavedMethod(f.ctx, f.buyer.ID, r.ID)
	if market.ErrorCode(err) != market.CodeInvalid || market.ErrorMessage(err) != "Add a payment method on your account page first." {
		t.Fatalf("no saved card: %v", err)
	}

	// A card the bank declines: a conflict for the buyer, still held,
	// nothing in the ledger, the failure noted.
	f.saveCard(f.buyer.ID, "4000 0000 0000 0002")
	_, err = f.wf.PayWithSavedMethod(f.ctx, f.buyer.ID, r.ID)
	if market.ErrorCode(err) != market.CodeConflict || !strings.Contains(market.ErrorMessage(err), "Visa •••• 0002 was declined") {
		t.Fatalf("declined card: %v", err)
	}
	if st := f.state(r.ID); st != market.ReservationHeld {
		t.Fatalf("after a decline the reservation is %s, want held", st)
	}
	if es, _ := f.db.ListLedger(f.ctx, r.ID); len(es) != 0 {
		t.Fatalf("ledger after a decline: %+v", es)
	}
	// The failure is kept for the reservation page; the processor's own
	// event for the declined intent, arriving later, tells the buyer
	// nothing twice.
	failed, err := f.db.FindPayment(f.ctx, r.ID)
	if err != nil || failed.Status != store.PaymentFailed || failed.PaymentIntentID != cl.payments[0] ||
		!strings.Contains(failed.FailureMessage, "Visa •••• 0002 was declined") {
		t.Fatalf("payment after the decline %+v, %v (declined intent %s)", failed, err, cl.payments[0])
	}
	f.apply([]billing.Event{{ID: "evt_declined_1", Type: billing.EventPaymentFailed, StripeType: "payment_intent.payment_failed",
		Created: f.now, ReservationID: r.ID, PaymentIntentID: cl.payments[0], FailureMessage: "Your card was declined."}}, nil)
	if n := f.countNotified(f.buyer.ID, fmt.Sprintf("The payment for reservation #%d did not go through", r.ID)); n != 1 {
		t.Errorf("the buyer was told %d times that the payment failed, want once", n)
	}

	// Another buyer's reservation is not found, whatever their cards.
	f.saveCard(f.admin.ID, "4242 4242 4242 4242")
	if _, err := f.wf.PayWithSavedMethod(f.ctx, f.admin.ID, r.ID); market.ErrorCode(err) != market.CodeNotFound {
		t.Fatalf("another user paying: %v", err)
	}

	// A card that succeeds, the newest: confirmed, the charge in the
	// ledger under the charged payment, as a checkout's payment is.
	f.saveCard(f.buyer.ID, "4242 4242 4242 4242")
	got, err := f.wf.PayWithSavedMethod(f.ctx, f.buyer.ID, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != market.ReservationConfirmed || got.ID != r.ID {
		t.Fatalf("paid: %+v", got)
	}
	p, err := f.db.FindPayment(f.ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	charge, err := f.local.RetrievePayment(f.ctx, p.PaymentIntentID)
	if err != nil {
		t.Fatal(err)
	}
	if p.Status != store.PaymentPaid || p.Amount != 19920 || !charge.Succeeded || charge.AmountReceived != 19920 ||
		charge.TransferGroup != fmt.Sprintf("res_%d", r.ID) || charge.ReservationID != r.ID {
		t.Fatalf("payment %+v, processor %+v", p, charge)
	}
	if f.ledgerSum(r.ID, market.EntryCharge) != 19920 {
		t.Fatalf("charged %s in the ledger, want $199.20", f.ledgerSum(r.ID, market.EntryCharge))
	}
	if !strings.Contains(fmt.Sprint(cl.payments), charge.ID) {
		t.Errorf("the charge %s was not made through ChargeSaved", charge.ID)
	}

	// Pressing again charges nothing; the processor's event for the same
	// payment later changes nothing either.
	if again, err := f.wf.PayWithSavedMethod(f.ctx, f.buyer.ID, r.ID); err != nil || again.State != market.ReservationConfirmed {
		t.Fatalf("paying again: %+v, %v", again, err)
	}
	f.apply([]billing.Event{{ID: "evt_saved_1", Type: billing.EventPaymentSucceeded, StripeType: "payment_intent.succeeded",
		Created: f.now, ReservationID: r.ID, PaymentIntentID: charge.ID, ChargeID: charge.ChargeID, AmountCents: 19920, Currency: "usd"}}, nil)
	if f.ledgerSum(r.ID, market.EntryCharge) != 19920 || f.state(r.ID) != market.ReservationConfirmed {
		t.Fatalf("after the event: charged %s, state %s", f.ledgerSum(r.ID, market.EntryCharge), f.state(r.ID))
	}
	if n := cl.distinct(); n != 2 {
		t.Errorf("%d payments at the processor, want 2 (the declined one and the charge)", n)
	}
	f.requireReconciled()
}

// Presses at once, all reaching the processor before any is recorded: the
// same idempotency key, one payment.
func TestPayWithSavedMethodConcurrent(t *testing.T) {
	cl := &chargeLog{gate: make(chan struct{}), gateN: 4}
	f := newFixture(t, func(l *billing.Local) billing.Processor { cl.Local = l; return cl })
	r := f.book(t0.Add(48 * time.Hour))
	f.saveCard(f.buyer.ID, "5555 5555 5555 4444")
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = f.wf.PayWithSavedMethod(f.ctx, f.buyer.ID, r.ID)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Errorf("concurrent press: %v", err)
		}
	}
	if n := cl.distinct(); n != 1 || len(cl.payments) != 4 {
		t.Fatalf("%d payments at the processor from %d charges, want 1 from 4", n, len(cl.payments))
	}
	es, err := f.db.ListLedger(f.ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || es[0].Kind != market.EntryCharge || es[0].Amount != 19920 {
		t.Fatalf("ledger %+v, want one charge of $199.20", es)
	}
	if f.state(r.ID) != market.ReservationConfirmed {
		t.Fatalf("state %s", f.state(r.ID))
	}
	f.requireReconciled()
}

// A checkout paid whose event has not arrived: the saved card is not
// charged too. A declined card leaves the hold to expire as any other.
func TestPayWithSavedMethodAfterCheckoutAndExpiry(t *testing.T) {
	cl := &chargeLog{}
	f := newFixture(t, func(l *billing.Local) billing.Processor { cl.Local = l; return cl })
	f.saveCard(f.buyer.ID, "4242 4242 4242 4242")
	r := f.book(t0.Add(48 * time.Hour))
	co, err := f.local.CreateCheckout(f.ctx, billing.CheckoutInput{ReservationID: r.ID, Amount: r.AmountCents, SuccessURL: "/ok", CancelURL: "/c",
		IdempotencyKey: fmt.Sprintf("res_%d_checkout", r.ID)})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.db.RecordCheckout(f.ctx, f.buyer.ID, r.ID, co.ID, r.AmountCents, f.now); err != nil {
		t.Fatal(err)
	}
	evs, err := f.local.CompleteCheckout(co.ID, true, f.now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.wf.PayWithSavedMethod(f.ctx, f.buyer.ID, r.ID); market.ErrorCode(err) != market.CodeConflict {
		t.Fatalf("paying a checkout-paid reservation with the saved card: %v", err)
	}
	if len(cl.payments) != 0 {
		t.Fatalf("the saved card was charged: %v", cl.payments)
	}
	f.apply(evs, nil)
	if f.state(r.ID) != market.ReservationConfirmed || f.ledgerSum(r.ID, market.EntryCharge) != 19920 {
		t.Fatalf("after the checkout's events: %s, charged %s", f.state(r.ID), f.ledgerSum(r.ID, market.EntryCharge))
	}

	// A declined card on another booking; the hold lapses; then paying is
	// refused before charging.
	f.saveCard(f.buyer.ID, "4000 0000 0000 0002")
	r2 := f.book(t0.Add(72 * time.Hour))
	if _, err := f.wf.PayWithSavedMethod(f.ctx, f.buyer.ID, r2.ID); market.ErrorCode(err) != market.CodeConflict {
		t.Fatalf("declined: %v", err)
	}
	f.tick(r2.HoldExpiresAt.Add(time.Minute))
	if st := f.state(r2.ID); st != market.ReservationExpired {
		t.Fatalf("after the hold the declined reservation is %s, want expired", st)
	}
	n := len(cl.payments)
	if _, err := f.wf.PayWithSavedMethod(f.ctx, f.buyer.ID, r2.ID); market.ErrorCode(err) != market.CodeConflict || len(cl.payments) != n {
		t.Fatalf("paying an expired hold: %v, %d charges", err, len(cl.payments)-n)
	}
	f.requireReconciled()
}

// The processor's setup-completed event saves the card when the buyer never
// comes back to the return page; the return page then finds it saved, and
// a replay after the buyer removed it does not bring it back.
func TestSetupCompletedEventSavesCard(t *testing.T) {
	f := newFixture(t, nil)
	co, err := f.proc.CreateSetupCheckout(f.ctx, billing.SetupInput{UserID: f.buyer.ID, SuccessURL: "/back", CancelURL: "/account"})
	if err != nil {
		t.Fatal(err)
	}
	event := func(id string) billing.Event {
		return billing.Event{ID: id, Type: billing.EventSetupCompleted, StripeType: "checkout.session.completed", Created: f.now,
			CheckoutID: co.ID, UserID: f.buyer.ID, PaymentStatus: "no_payment_required"}
	}
	// Before the card is chosen the setup is not complete: nothing saved,
	// no error (the event is not retried for it).
	f.apply([]billing.Event{event("evt_early")}, nil)
	if _, err := f.db.DefaultPaymentMethod(f.ctx, f.buyer.ID); market.ErrorCode(err) != market.CodeNotFound {
		t.Fatalf("card saved from an incomplete setup: %v", err)
	}
	if _, err := f.local.CompleteSetup(co.ID, "5555 5555 5555 4444"); err != nil {
		t.Fatal(err)
	}
	f.apply([]billing.Event{event("evt_setup"), event("evt_setup")}, nil)
	ms, err := f.db.ListPaymentMethods(f.ctx, f.buyer.ID)
	if err != nil || len(ms) != 1 || ms[0].Label != "Mastercard •••• 4444" || ms[0].UserID != f.buyer.ID {
		t.Fatalf("cards after the event %+v, %v", ms, err)
	}
	// The buyer's return: the same card; another user's: not found.
	if m, err := f.wf.SaveSetupCard(f.ctx, f.buyer.ID, co.ID); err != nil || m != ms[0] {
		t.Fatalf("return after the event %+v, %v; want %+v", m, err, ms[0])
	}
	if _, err := f.wf.SaveSetupCard(f.ctx, f.admin.ID, co.ID); market.ErrorCode(err) != market.CodeNotFound {
		t.Fatalf("another user's return: %v", err)
	}
	if err := f.db.RemovePaymentMethod(f.ctx, f.buyer.ID, ms[0].ID, f.now); err != nil {
		t.Fatal(err)
	}
	f.apply([]billing.Event{event("evt_setup_late")}, nil)
	if _, err := f.db.DefaultPaymentMethod(f.ctx, f.buyer.ID); market.ErrorCode(err) != market.CodeNotFound {
		t.Fatalf("a late event brought back the removed card: %v", err)
	}
}

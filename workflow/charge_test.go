package workflow

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
)

// crashingProcessor makes the charge at the real (local) processor and
// then loses the answer, as a process killed while the charge's response
// was on its way would: the money has moved, the caller never hears of it.
// With stall set the charge does not reach the processor at all. A spot
// hour's hold (an authorisation) stalls too but is never lost or refused:
// its charge is the capture, which fails the same ways.
type crashingProcessor struct {
	billing.Processor
	mu      sync.Mutex
	crashes int // how many more charges to lose the answer of
	stall   bool
	refuse  bool // refuse every charge as an invalid request
	// loseHolds is how many more holds to place and then lose the answer of.
	loseHolds int
	made      []string // the processor payments the charges made
}

func (p *crashingProcessor) ChargeSaved(ctx context.Context, in billing.ChargeInput) (billing.Payment, error) {
	if in.Authorize {
		p.mu.Lock()
		stall := p.stall && !p.refuse
		p.mu.Unlock()
		if stall {
			return billing.Payment{}, &billing.Error{Op: "authorize", Retryable: true, Err: errors.New("processor unreachable")}
		}
		pay, err := p.Processor.ChargeSaved(ctx, in)
		p.mu.Lock()
		lose := p.loseHolds > 0
		if lose {
			p.loseHolds--
		}
		p.mu.Unlock()
		if lose {
			return billing.Payment{}, &billing.Error{Op: "authorize", Retryable: true, Err: errors.New("connection reset after the request was sent")}
		}
		return pay, err
	}
	return p.charge(func() (billing.Payment, error) { return p.Processor.ChargeSaved(ctx, in) })
}

func (p *crashingProcessor) Capture(ctx context.Context, in billing.CaptureInput) (billing.Payment, error) {
	return p.charge(func() (billing.Payment, error) { return p.Processor.Capture(ctx, in) })
}

// charge makes one charge (or capture) through the faults set.
func (p *crashingProcessor) charge(make func() (billing.Payment, error)) (billing.Payment, error) {
	p.mu.Lock()
	stall, crash := p.stall, p.crashes > 0
	if p.refuse {
		stall = false
	}
	if crash {
		p.crashes--
	}
	p.mu.Unlock()
	if stall {
		return billing.Payment{}, &billing.Error{Op: "charge", Retryable: true, Err: errors.New("processor unreachable")}
	}
	if p.refuse {
		return billing.Payment{}, &billing.Error{Op: "charge", Status: 400, Code: "parameter_invalid", Err: errors.New("invalid request")}
	}
	pay, err := make()
	if err == nil {
		p.mu.Lock()
		p.made = append(p.made, pay.ID)
		p.mu.Unlock()
	}
	if crash {
		return billing.Payment{}, &billing.Error{Op: "charge", Retryable: true, Err: errors.New("connection reset after the request was sent")}
	}
	return pay, err
}

// restart is the process coming back after a crash: a new Service over the
// same database, with the processor working again.
func (f *fixture) restart() {
	f.t.Helper()
	wf, err := New(f.ctx, Config{Billing: f.local, PlatformFeeBP: feeBP, Now: func() time.Time { return f.now }}, f.db,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		f.t.Fatal(err)
	}
	f.wf, f.proc = wf, f.local
}

// listForResale books and pays a reservation as the fixture's buyer, lists
// it whole for resale at 374¢, and signs up a second buyer with a saved
// card (number) to buy it.
func (f *fixture) listForResale(number string) (market.User, market.ResaleListing) {
	f.t.Helper()
	f.onboard()
	start := t0.Add(2 * time.Hour)
	r := f.book(start)
	f.pay(r)
	second := f.user("second@example.com")
	f.saveCard(second.ID, number)
	l, err := f.wf.ListRemainingTime(f.ctx, f.buyer.ID, r.ID, start, 374)
	if err != nil {
		f.t.Fatal(err)
	}
	return second, l
}

// processorPayments is every succeeded payment the local processor holds.
func (f *fixture) processorPayments() []billing.Payment {
	f.t.Helper()
	ps, err := f.local.ListPayments(f.ctx, time.Time{})
	if err != nil {
		f.t.Fatal(err)
	}
	var out []billing.Payment
	for _, p := range ps {
		if p.Succeeded {
			out = append(out, p)
		}
	}
	return out
}

// A won spot hour whose charge went through just before a crash: the
// clearing recorded the charge with the hold, so after the restart the
// retrier finds it, the processor answers the repeated call with the same
// payment (one payment, not two), and the hour is paid and confirmed
// rather than lapsing. Figures by hand: one bid, 2 devices, floor 100¢ →
// 200¢.
func TestSpotChargeMadeBeforeACrashIsRecordedAfterTheRestart(t *testing.T) {
	var cp *crashingProcessor
	f := newFixture(t, func(l *billing.Local) billing.Processor { cp = &crashingProcessor{Processor: l, crashes: 1}; return cp })
	f.onboard()
	o := f.spotOffer()
	f.saveCard(f.buyer.ID, "4242 4242 4242 4242")
	h1 := t0.Add(2 * time.Hour)
	b := f.bid(f.buyer, o, 2, 150, h1, h1)

	clearAt := h1.Add(-30 * time.Minute)
	f.tick(clearAt) // clears 11:00; the charge is made, its answer lost
	hs := f.spotHours(f.buyer, b.ID)
	if len(hs) != 1 || hs[0].State != market.ReservationHeld {
		t.Fatalf("won hours after the lost answer: %+v, want one held", hs)
	}
	if len(cp.made) != 1 {
		t.Fatalf("processor payments made: %v, want 1", cp.made)
	}
	if got := f.ledgerSum(hs[0].ReservationID, market.EntryCharge); got != 0 {
		t.Fatalf("charged in the ledger before the restart: %d", got)
	}
	// Reconciliation sees the unfinished charge once its grace has passed.
	f.now = clearAt.Add(market.ChargeRetryGrace + time.Second)
	diffs, err := f.wf.Reconcile(f.ctx, ReconcileOptions{})
	if err != nil || len(diffs) != 1 || diffs[0].ReservationID != hs[0].ReservationID {
		t.Fatalf("reconcile with the charge unfinished: %v %+v, want one difference for reservation %d", err, diffs, hs[0].ReservationID)
	}

	f.restart()
	f.tick(clearAt.Add(market.ChargeRetryGrace + time.Second))
	hs = f.spotHours(f.buyer, b.ID)
	if len(hs) != 1 || hs[0].State != market.ReservationConfirmed {
		t.Fatalf("won hours after the restart: %+v, want one confirmed", hs)
	}
	if got := f.ledgerSum(hs[0].ReservationID, market.EntryCharge); got != 200 {
		t.Fatalf("charged %d after the restart, want 2 × 100 = 200", got)
	}
	if ps := f.processorPayments(); len(ps) != 1 || ps[0].ID != cp.made[0] || ps[0].AmountReceived != 200 {
		t.Fatalf("processor payments %+v, want the one made before the crash", ps)
	}
	f.requireReconciled()
}

// A resale purchase charged just before a crash, and the listing withdrawn
// before the restart: the charge was recorded first, so the retrier finds
// it, records the payment as unsold and refunds it in full — no charge
// without a row. The seller keeps the time.
func TestResaleChargeMadeBeforeACrashIsRefundedWhenTheListingIsGone(t *testing.T) {
	var cp *crashingProcessor
	f := newFixture(t, func(l *billing.Local) billing.Processor { cp = &crashingProcessor{Processor: l, crashes: 1}; return cp })
	second, l := f.listForResale("4242 4242 4242 4242")
	if _, err := f.wf.BuyResale(f.ctx, second.ID, l.ID); err == nil {
		t.Fatal("purchase with the processor's answer lost succeeded")
	}
	if len(cp.made) != 1 {
		t.Fatalf("processor payments made: %v, want 1", cp.made)
	}
	if _, err := f.wf.WithdrawResale(f.ctx, f.buyer.ID, l.ID); err != nil {
		t.Fatal(err)
	}

	f.restart()
	f.tick(f.now.Add(market.ChargeRetryGrace + time.Second))
	refunds, err := f.local.ListRefunds(f.ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var back market.Cents
	for _, re := range refunds {
		if re.PaymentIntentID == cp.made[0] {
			back += re.Amount
		}
	}
	if back != 374 {
		t.Fatalf("refunded %d of the lost purchase's 374", back)
	}
	got, err := f.db.FindResaleOffer(f.ctx, l.ID)
	if err != nil || got.Listing.State != market.ListingWithdrawn || got.Listing.BuyerID != 0 {
		t.Fatalf("listing after the restart %+v, %v; want withdrawn, unsold", got.Listing, err)
	}
	f.requireReconciled()
}

// A purchase whose charge never reached the processor (it was down) is
// made by the retrier under the same key once it is back, and the listing
// sold: once.
func TestResaleChargeRetriedAfterTheProcessorWasDown(t *testing.T) {
	var cp *crashingProcessor
	f := newFixture(t, func(l *billing.Local) billing.Processor {
		cp = &crashingProcessor{Processor: l, stall: true}
		return cp
	})
	second, l := f.listForResale("4242 4242 4242 4242")
	if _, err := f.wf.BuyResale(f.ctx, second.ID, l.ID); market.ErrorCode(err) != market.CodeInternal {
		t.Fatalf("purchase with the processor down: %v, want an internal error", err)
	}
	// A second press while the first is pending does not start a second charge.
	if _, err := f.wf.BuyResale(f.ctx, second.ID, l.ID); market.ErrorCode(err) != market.CodeInternal {
		t.Fatalf("second press with the processor down: %v", err)
	}
	cp.mu.Lock()
	cp.stall = false
	cp.mu.Unlock()
	f.tick(f.now.Add(market.ChargeRetryGrace + time.Minute))
	got, err := f.db.FindResaleOffer(f.ctx, l.ID)
	if err != nil || got.Listing.State != market.ListingSold || got.Listing.BuyerID != second.ID {
		t.Fatalf("listing after the retry %+v, %v; want sold to the second buyer", got.Listing, err)
	}
	if len(cp.made) != 1 || got.Listing.ChargeRef != cp.made[0] {
		t.Fatalf("processor payments %v, sale paid by %q", cp.made, got.Listing.ChargeRef)
	}
	f.requireReconciled()
}

// A declined card does not lock the listing: the next try with a good card
// is a new charge with a new key, and succeeds (before, the key was the
// listing and the buyer, and the processor refused it as reused with other
// arguments on every retry).
func TestResaleAfterADeclinedCardSucceedsWithAnother(t *testing.T) {
	f := newFixture(t, nil)
	second, l := f.listForResale("4000 0000 0000 0002")
	if _, err := f.wf.BuyResale(f.ctx, second.ID, l.ID); market.ErrorCode(err) != market.CodeConflict {
		t.Fatalf("declined card: %v, want conflict", err)
	}
	f.saveCard(second.ID, "4242 4242 4242 4242")
	n, err := f.wf.BuyResale(f.ctx, second.ID, l.ID)
	if err != nil || n.BuyerID != second.ID {
		t.Fatalf("purchase with a good card after a decline: %+v, %v", n, err)
	}
	f.requireReconciled()
}

// A standing order that pays at once, charged just before a crash: the
// fill recorded the charge with the hold, and the retrier confirms it
// after the restart.
func TestStandingOrderChargeMadeBeforeACrashIsRecordedAfterTheRestart(t *testing.T) {
	var cp *crashingProcessor
	f := newFixture(t, func(l *billing.Local) billing.Processor { cp = &crashingProcessor{Processor: l, crashes: 1}; return cp })
	f.onboard()
	f.saveCard(f.buyer.ID, "4242 4242 4242 4242")
	start := t0.Add(48 * time.Hour)
	o := f.place(f.buyer.ID, gangRequest(start, 8, 2), 100_000, market.FillPay)
	f.matchInBackground()
	row := f.waitOrder(f.buyer.ID, o.ID)
	f.waitIdle()
	if row.ReservationID == 0 || len(cp.made) != 1 {
		t.Fatalf("order after the fill %+v, payments %v", row, cp.made)
	}
	if st := f.state(row.ReservationID); st != market.ReservationHeld {
		t.Fatalf("fill with the answer lost is %s, want held", st)
	}
	f.restart()
	f.tick(f.now.Add(market.ChargeRetryGrace + time.Second))
	if st := f.state(row.ReservationID); st != market.ReservationConfirmed {
		t.Fatalf("fill after the restart is %s, want confirmed", st)
	}
	// 8 devices × 2 h × 249¢ = 3,984¢, charged once.
	if got := f.ledgerSum(row.ReservationID, market.EntryCharge); got != 3984 {
		t.Fatalf("charged %d, want 3,984", got)
	}
	if ps := f.processorPayments(); len(ps) != 1 {
		t.Fatalf("processor payments %+v, want 1", ps)
	}
	f.requireReconciled()
}

// Reconciliation lists what the processor holds and no row explains: a
// charge of a saved card made outside the workflow, and a refund of it.
func TestReconcileReportsUnexplainedProcessorObjects(t *testing.T) {
	f := newFixture(t, nil)
	m := f.saveCard(f.buyer.ID, "4242 4242 4242 4242")
	f.requireReconciled()
	pay, err := f.local.ChargeSaved(f.ctx, billing.ChargeInput{Customer: m.Customer, PaymentMethodID: m.ProcessorMethodID,
		Amount: 374, IdempotencyKey: "outside_the_record"})
	if err != nil {
		t.Fatal(err)
	}
	diffs, err := f.wf.Reconcile(f.ctx, ReconcileOptions{})
	if err != nil || len(diffs) != 1 || diffs[0].Processor != market.Cents(374).String() {
		t.Fatalf("reconcile with an unrecorded payment: %v %+v, want one difference of 3.74", err, diffs)
	}
	if _, err := f.local.Refund(f.ctx, pay.ID, 100, "outside_the_record_refund"); err != nil {
		t.Fatal(err)
	}
	diffs, err = f.wf.Reconcile(f.ctx, ReconcileOptions{})
	if err != nil || len(diffs) != 2 {
		t.Fatalf("reconcile with an unrecorded payment and refund: %v %+v, want two differences", err, diffs)
	}
	// Ledger-only reconciliation does not ask the processor.
	if diffs, err := f.wf.Reconcile(f.ctx, ReconcileOptions{LedgerOnly: true}); err != nil || len(diffs) != 0 {
		t.Fatalf("ledger-only reconcile: %v %+v", err, diffs)
	}
}

// A charge the processor refuses outright (an invalid request, not
// retryable) charged nothing and would be refused again: it ends declined
// at once, the reservation stays held for the buyer to pay another way,
// and nothing is left pending for the retrier.
func TestRefusedChargeEndsAtOnce(t *testing.T) {
	f := newFixture(t, func(l *billing.Local) billing.Processor { return &crashingProcessor{Processor: l, refuse: true} })
	f.saveCard(f.buyer.ID, "4242 4242 4242 4242")
	r := f.book(t0.Add(48 * time.Hour))
	if _, err := f.wf.PayWithSavedMethod(f.ctx, f.buyer.ID, r.ID); market.ErrorCode(err) != market.CodeConflict {
		t.Fatalf("refused charge: %v, want a conflict for the buyer", err)
	}
	if st := f.state(r.ID); st != market.ReservationHeld {
		t.Fatalf("reservation %s after the refusal, want held", st)
	}
	if due, err := f.db.ListDueChargeIntents(f.ctx, time.Time{}); err != nil || len(due) != 0 {
		t.Fatalf("pending charges after a refusal: %+v, %v", due, err)
	}
	f.now = f.now.Add(market.ChargeRetryGrace + time.Second)
	f.requireReconciled()
}

// A won spot hour whose charge could not be made at the clearing (the
// processor was down) and that the retrier then finds declined stops its
// bid, as a decline at the clearing does: the bid wins no further hours.
func TestSpotBidStoppedWhenTheRetrierFindsTheCardDeclined(t *testing.T) {
	var cp *crashingProcessor
	f := newFixture(t, func(l *billing.Local) billing.Processor {
		cp = &crashingProcessor{Processor: l, stall: true}
		return cp
	})
	f.onboard()
	o := f.spotOffer()
	f.saveCard(f.buyer.ID, "4000 0000 0000 0002")
	h1 := t0.Add(2 * time.Hour)
	b := f.bid(f.buyer, o, 2, 150, h1, h1.Add(2*time.Hour))
	clearAt := h1.Add(-30 * time.Minute)
	f.tick(clearAt)
	state := func() market.SpotBidState {
		rs, err := f.db.ListBuyerSpotBids(f.ctx, f.buyer.ID)
		if err != nil || len(rs) != 1 {
			t.Fatalf("bids %+v, %v", rs, err)
		}
		return rs[0].Bid.State
	}
	if st := state(); st != market.SpotBidLive {
		t.Fatalf("bid %d after a clearing with the processor down: %s, want live", b.ID, st)
	}
	cp.mu.Lock()
	cp.stall = false
	cp.mu.Unlock()
	f.tick(clearAt.Add(market.ChargeRetryGrace + time.Second))
	if st := state(); st != market.SpotBidCancelled {
		t.Fatalf("bid after the retrier found the card declined: %s, want cancelled", st)
	}
	f.requireReconciled()
}

// A hold placed at the processor whose answer was lost: the bid sits that
// hour out (its hold was never recorded as authorised), and the hold is
// not left on the card: after the clearing it is asked for again under
// the same key, which finds the same payment, and released. The next
// hour the bid holds, wins and pays normally. Figures by hand: 2 devices
// at a 150¢ maximum, floor 100¢: holds of 300¢, the 12:00 hour paid 200¢.
func TestLostSpotHoldIsReleasedNotLeftOnTheCard(t *testing.T) {
	var cp *crashingProcessor
	f := newFixture(t, func(l *billing.Local) billing.Processor {
		cp = &crashingProcessor{Processor: l, loseHolds: 1}
		return cp
	})
	f.onboard()
	o := f.spotOffer()
	f.saveCard(f.buyer.ID, "4242 4242 4242 4242")
	h1 := t0.Add(2 * time.Hour)
	b := f.bid(f.buyer, o, 2, 150, h1, h1.Add(time.Hour))
	f.tick(h1.Add(-30 * time.Minute))
	if hs := f.spotHours(f.buyer, b.ID); len(hs) != 0 {
		t.Fatalf("won hours with the hold unanswered: %+v", hs)
	}
	rel, held := f.paymentsInStatus("canceled"), f.paymentsInStatus("requires_capture")
	if len(rel) != 1 || rel[0].Amount != 300 || rel[0].AmountReceived != 0 || len(held) != 0 {
		t.Fatalf("after the lost hold: released %+v, still held %+v", rel, held)
	}
	f.tick(h1.Add(30 * time.Minute))
	hs := f.spotHours(f.buyer, b.ID)
	if len(hs) != 1 || hs[0].State != market.ReservationConfirmed || hs[0].PriceCents != 100 || f.ledgerSum(hs[0].ReservationID, market.EntryCharge) != 200 {
		t.Fatalf("12:00: %+v", hs)
	}
	if rs, _ := f.db.ListBuyerSpotBids(f.ctx, f.buyer.ID); len(rs) != 1 || rs[0].Bid.State == market.SpotBidCancelled {
		t.Fatalf("bid after a lost hold: %+v", rs)
	}
	f.requireReconciled()
}

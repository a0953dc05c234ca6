package workflow

import (
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// acceptancePeriod gives the fixture's offer an acceptance period of
// minutes, for the bookings made after it.
func (f *fixture) acceptancePeriod(minutes int) {
	f.t.Helper()
	o := f.offer
	o.RejectMinutes = minutes
	got, _, err := f.db.UpdateOffer(f.ctx, f.prov.ID, o, f.now)
	if err != nil {
		f.t.Fatal(err)
	}
	// An edited offer goes back to review.
	if err := f.db.ReviewOffer(f.ctx, got.ID, market.ReviewApproved, "", f.now); err != nil {
		f.t.Fatal(err)
	}
	f.offer = got
}

// failAcceptance has the agent of node 0 of r's first piece report, now,
// an acceptance test that could not run: the rental failed its contract.
func (f *fixture) failAcceptance(r market.Reservation) {
	f.t.Helper()
	p := r.Pieces[0]
	tok, _, err := f.db.CreateHostToken(f.ctx, f.prov.ID, p.OfferID, 0, f.now)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.db.RecordAcceptance(f.ctx, tok.ID, p.ID, market.AcceptanceResult{Metric: market.FigureBF16TFLOPS, Error: "GPU 3 missing"}, f.now); err != nil {
		f.t.Fatal(err)
	}
}

// A buyer whose rental failed its acceptance test and who rejects it in
// its first 30 minutes gets back all of the
// 19,920¢ paid, through the processor; the provider is paid nothing and the
// platform keeps no fee; the books reconcile with the processor.
func TestRejectingARentalRefundsInFull(t *testing.T) {
	f := newFixture(t, nil)
	f.onboard()
	f.acceptancePeriod(30)
	start := t0.Add(48 * time.Hour)
	r := f.book(start)
	f.pay(r)
	f.tick(start.Add(time.Minute)) // active
	f.now = start.Add(20 * time.Minute)

	other, err := f.wf.Reject(f.ctx, f.prov.ID, r.ID, "")
	if market.ErrorCode(err) != market.CodeNotFound {
		t.Fatalf("someone else's rejection: %+v, %v", other, err)
	}
	f.failAcceptance(r)
	got, err := f.wf.Reject(f.ctx, f.buyer.ID, r.ID, "Acceptance test 40% short")
	if err != nil || got.State != market.ReservationCancelled || !got.RejectedAt.Equal(f.now) {
		t.Fatalf("reject: %+v, %v", got, err)
	}
	s := f.settlement(r.ID)
	if !s.RefundDone || s.RefundCents != 19920 || s.State != store.SettlementDone || len(s.Transfers) != 1 ||
		s.Transfers[0].Amount != 0 || s.Transfers[0].Ref != "" {
		t.Fatalf("settlement: refund %d done %v state %s transfers %+v", s.RefundCents, s.RefundDone, s.State, s.Transfers)
	}
	ref, err := f.local.RetrieveRefund(f.ctx, s.RefundRef)
	if err != nil || ref.Amount != 19920 {
		t.Fatalf("processor refund %+v, %v", ref, err)
	}
	if b := f.balance(r.ID); b[market.AccountPlatformFees] != 0 || b[market.ProviderAccount(f.prov.ID)] != 0 || b[market.BuyerAccount(f.buyer.ID)] != 0 {
		t.Fatalf("balances after the rejection %+v", b)
	}
	if f.ledgerSum(r.ID, market.EntryTransfer) != 0 || f.ledgerSum(r.ID, market.EntryRefund) != 19920 {
		t.Fatal("a rejected rental paid the provider or did not refund the buyer in full")
	}
	if !f.notified(f.prov.ID, "rejected booking") {
		t.Fatal("the provider is not told")
	}
	// Rejecting again changes nothing.
	if _, err := f.wf.Reject(f.ctx, f.buyer.ID, r.ID, ""); market.ErrorCode(err) != market.CodeConflict {
		t.Fatalf("second rejection: %v", err)
	}
	f.tick(start.Add(11 * time.Hour))
	if res, _ := f.db.FindReservation(f.ctx, r.ID); res.State != market.ReservationCancelled {
		t.Fatalf("state after the end: %s", res.State)
	}
	f.requireReconciled()
}

// Too late is a conflict that changes nothing: the rental runs on and
// settles as usual.
func TestRejectingTooLateChangesNothing(t *testing.T) {
	f := newFixture(t, nil)
	f.acceptancePeriod(30)
	start := t0.Add(48 * time.Hour)
	r := f.book(start)
	f.pay(r)
	f.tick(start.Add(30 * time.Minute))
	_, err := f.wf.Reject(f.ctx, f.buyer.ID, r.ID, "")
	if market.ErrorCode(err) != market.CodeConflict || !strings.Contains(market.ErrorMessage(err), "Too late to reject") {
		t.Fatalf("at the deadline: %v", err)
	}
	if res, _ := f.db.FindReservation(f.ctx, r.ID); res.State != market.ReservationActive || !res.RejectedAt.IsZero() {
		t.Fatalf("after a refused rejection: %+v", res)
	}
	if _, err := f.db.FindSettlement(f.ctx, r.ID); market.ErrorCode(err) != market.CodeNotFound {
		t.Fatalf("a settlement after a refused rejection: %v", err)
	}
	f.requireReconciled()
}

// A processor outage at the rejection loses nothing: the refund is owed
// (reconciliation says so) until the retrier makes it, once.
func TestRejectionRefundIsRetried(t *testing.T) {
	fl := &flaky{}
	f := newFixture(t, func(l *billing.Local) billing.Processor { fl.Local = l; return fl })
	f.acceptancePeriod(45)
	start := t0.Add(48 * time.Hour)
	r := f.book(start)
	f.pay(r)
	fl.failRefunds = 1
	f.now = start.Add(44 * time.Minute)
	f.failAcceptance(r)
	if _, err := f.wf.Reject(f.ctx, f.buyer.ID, r.ID, ""); err != nil {
		t.Fatal(err)
	}
	if s := f.settlement(r.ID); s.RefundDone || s.Attempts != 1 || s.State != store.SettlementPending {
		t.Fatalf("after the failed refund: %+v", s)
	}
	diffs, err := f.wf.Reconcile(f.ctx, ReconcileOptions{})
	if err != nil || len(diffs) != 1 || !strings.Contains(diffs[0].What, "refund not made yet") {
		t.Fatalf("reconcile while the refund is owed: %+v, %v", diffs, err)
	}
	f.tick(f.now.Add(time.Minute))
	f.tick(f.now.Add(time.Hour))
	if s := f.settlement(r.ID); !s.RefundDone || s.State != store.SettlementDone || s.RefundCents != 19920 {
		t.Fatalf("after the retry: %+v", s)
	}
	if f.ledgerSum(r.ID, market.EntryRefund) != 19920 {
		t.Fatalf("refunded %s", f.ledgerSum(r.ID, market.EntryRefund))
	}
	f.requireReconciled()
}

// With no failed acceptance test or measured outage, a rejection pays the
// provider for the minutes used (at least 10), the rest refunded; after
// market.RejectLimit such rejections in 7 days the next is refused.
func TestUnfoundedRejectionPaysTheMinutesUsed(t *testing.T) {
	f := newFixture(t, nil)
	f.onboard()
	f.acceptancePeriod(30)
	start := t0.Add(48 * time.Hour)
	var rs []market.Reservation
	for i := 0; i <= market.RejectLimit; i++ {
		r := f.book(start.Add(time.Duration(i) * 11 * time.Hour))
		f.pay(r)
		rs = append(rs, r)
	}
	for i, r := range rs {
		f.tick(r.Start().Add(time.Minute))
		f.now = r.Start().Add(12*time.Minute + 30*time.Second)
		_, err := f.wf.Reject(f.ctx, f.buyer.ID, r.ID, "")
		if i == market.RejectLimit {
			if market.ErrorCode(err) != market.CodeConflict || !strings.Contains(market.ErrorMessage(err), "the most allowed") {
				t.Fatalf("rejection %d: %v, want refused", i+1, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("rejection %d: %v", i+1, err)
		}
		// 13 minutes used (rounded up) of a 10-hour piece of 19,920¢:
		// 19920 × 13 / 600 = 431.6 → 432¢ kept, 19,488¢ refunded.
		s := f.settlement(r.ID)
		if s.RefundCents != 19488 || f.ledgerSum(r.ID, market.EntryRefund) != 19488 ||
			f.ledgerSum(r.ID, market.EntryTransfer)+f.ledgerSum(r.ID, market.EntryFee) != 432 {
			t.Fatalf("rejection %d: refund %s, transfers %s, fee %s", i+1, s.RefundCents, f.ledgerSum(r.ID, market.EntryTransfer), f.ledgerSum(r.ID, market.EntryFee))
		}
	}
	f.tick(rs[len(rs)-1].End().Add(time.Hour))
	f.requireReconciled()
}

package workflow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// A running reservation's last six hours are resold; both reservations
// settle. Figures by hand from the terms: the seller booked 8 devices ×
// 10 h × 249¢ = 19,920¢. At 3 h 10 min in, the first whole hour at least
// 15 minutes ahead is 4 h in; six of ten hours remain, so the cap is
// 19,920 × 6 / 10 = 11,952¢. The price 9,999¢: the platform's 10% fee is
// 999.9 → 1,000¢, the seller's credit 8,999¢. The provider, with no
// incidents, keeps all 19,920¢ of the original booking: fee 1,992¢,
// payout 17,928¢ — as without the sale — and nothing more.
func TestResaleMoneyAndSettlement(t *testing.T) {
	f := newFixture(t, nil)
	f.onboard()
	start := t0.Add(2 * time.Hour)
	r := f.book(start)
	f.pay(r)
	second := f.user("second@example.com")
	f.saveCard(second.ID, "4242 4242 4242 4242")

	f.tick(start.Add(3*time.Hour + 10*time.Minute))
	from := start.Add(4 * time.Hour)
	if _, err := f.wf.ListRemainingTime(f.ctx, f.buyer.ID, r.ID, from, 11953); market.ErrorCode(err) != market.CodeInvalid {
		t.Fatalf("a price 1¢ over the cap: %v, want invalid", err)
	}
	if _, err := f.wf.ListRemainingTime(f.ctx, f.buyer.ID, r.ID, from.Add(-time.Hour), 100); market.ErrorCode(err) != market.CodeInvalid {
		t.Fatalf("an hour too soon: %v, want invalid", err)
	}
	if _, err := f.wf.ListRemainingTime(f.ctx, second.ID, r.ID, from, 100); market.ErrorCode(err) != market.CodeNotFound {
		t.Fatalf("another user's reservation: %v, want not found", err)
	}
	l, err := f.wf.ListRemainingTime(f.ctx, f.buyer.ID, r.ID, from, 9999)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.wf.BuyResale(f.ctx, f.buyer.ID, l.ID); market.ErrorCode(err) != market.CodeInvalid {
		t.Fatalf("seller buying their own listing: %v, want invalid", err)
	}

	n, err := f.wf.BuyResale(f.ctx, second.ID, l.ID)
	if err != nil {
		t.Fatal(err)
	}
	if n.BuyerID != second.ID || n.ResaleOf != r.ID || n.State != market.ReservationConfirmed || len(n.Pieces) != 1 {
		t.Fatalf("bought reservation = %+v", n)
	}
	p, op := n.Pieces[0], r.Pieces[0]
	if !p.Start.Equal(from) || !p.End.Equal(start.Add(10*time.Hour)) || p.Devices != 8 || p.OfferID != f.offer.ID || p.AmountCents != 0 ||
		p.Terms.UptimeBP != 9950 || p.Terms.CreditCapBP != 5000 || p.CancelFeeBP != 1000 || len(p.Nodes) != 1 || p.Nodes[0] != op.Nodes[0] {
		t.Fatalf("bought piece = %+v", p)
	}
	again, err := f.wf.BuyResale(f.ctx, second.ID, l.ID)
	if err != nil || again.ID != n.ID {
		t.Fatalf("repeated purchase = %d, %v; want reservation %d again", again.ID, err, n.ID)
	}
	orig, err := f.db.FindReservation(f.ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !orig.ResoldAt.Equal(from) || orig.AmountCents != 19920 || !orig.Pieces[0].End.Equal(start.Add(10*time.Hour)) {
		t.Fatalf("original after the sale = %+v", orig)
	}
	// Capacity is held once: only the original's piece holds it.
	cs, err := f.db.ListAllCommitments(f.ctx, f.now)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].ID != op.ID || cs[0].Devices != 8 {
		t.Fatalf("commitments after the sale = %+v, want only piece %d", cs, op.ID)
	}
	if _, err := f.db.CancelReservation(f.ctx, second.ID, n.ID, feeBP, f.now); market.ErrorCode(err) != market.CodeConflict {
		t.Fatalf("cancelling bought time: %v, want conflict", err)
	}

	// The seller's credit was refunded at once, on their own payment.
	if got := f.ledgerSum(r.ID, market.EntryRefund); got != 8999 {
		t.Fatalf("refunds on the original = %s, want the seller's credit 89.99", got)
	}
	if !f.notified(f.buyer.ID, "sold for $99.99") || !f.notified(second.ID, "You bought reservation") {
		t.Fatal("seller and buyer not both told")
	}
	// The credit's refund says what it is for: the time resold.
	if !f.notified(f.buyer.ID, fmt.Sprintf("A refund of $89.99 for reservation #%d is on its way to your card (the time you resold).", r.ID)) ||
		f.notified(f.buyer.ID, "time not charged, or a cancellation") {
		t.Fatal("the seller's credit is not described as the time resold")
	}

	f.tick(start.Add(10 * time.Hour))
	f.tick(start.Add(10*time.Hour + time.Minute))
	st := f.settlement(r.ID)
	if st.State != store.SettlementDone || len(st.Transfers) != 1 || st.Transfers[0].Amount != 17928 || st.RefundCents != 0 {
		t.Fatalf("original's settlement = %+v, want one payout of 179.28 and no refund", st)
	}
	if got := f.ledgerSum(r.ID, market.EntryTransfer) + f.ledgerSum(n.ID, market.EntryTransfer); got != 17928 {
		t.Fatalf("provider paid %s in all, want 179.28 as without the sale", got)
	}
	bought, err := f.db.FindReservation(f.ctx, n.ID)
	if err != nil {
		t.Fatal(err)
	}
	if bought.State != market.ReservationSettled {
		t.Fatalf("bought reservation is %s, want settled with its original", bought.State)
	}

	// The identity: what the buyer paid is the seller's credit plus the
	// platform's fee plus what the provider gets extra (nothing).
	es, err := f.db.ListLedger(f.ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	var paidBySecond, sellerCredit, resaleFee, providerExtra market.Cents
	for _, e := range es {
		switch {
		case e.Kind == market.EntryCharge && e.Credit == market.BuyerAccount(second.ID):
			paidBySecond += e.Amount
		case e.Kind == market.EntryRefund && e.Debit == market.BuyerAccount(f.buyer.ID):
			sellerCredit += e.Amount
		case e.Kind == market.EntryFee && e.Debit == market.BuyerAccount(f.buyer.ID):
			resaleFee += e.Amount
		case e.Kind == market.EntryTransfer:
			providerExtra += e.Amount
		}
	}
	providerExtra -= 17928
	if paidBySecond != 9999 || sellerCredit != 8999 || resaleFee != 1000 || providerExtra != 0 ||
		sellerCredit+resaleFee+providerExtra != paidBySecond {
		t.Fatalf("paid %s = credit %s + fee %s + provider extra %s?", paidBySecond, sellerCredit, resaleFee, providerExtra)
	}
	b := f.balance(r.ID)
	if b[market.BuyerAccount(f.buyer.ID)] != 0 || b[market.BuyerAccount(second.ID)] != 0 || b[market.ProviderAccount(f.prov.ID)] != 0 ||
		b[market.AccountPlatformFees] != -(1992+1000) {
		t.Fatalf("balances after settlement = %v", b)
	}
	f.requireReconciled()
}

// flakyRefunds fails every refund while down is set, and holds each
// charge of a saved card until `barrier` charges have arrived, so racing
// buyers both pass the listing's check before either is sold it.
type flakyRefunds struct {
	billing.Processor
	mu      sync.Mutex
	down    bool
	barrier sync.WaitGroup
}

func (p *flakyRefunds) ChargeSaved(ctx context.Context, in billing.ChargeInput) (billing.Payment, error) {
	p.barrier.Done()
	p.barrier.Wait()
	return p.Processor.ChargeSaved(ctx, in)
}

func (p *flakyRefunds) Refund(ctx context.Context, pi string, amount market.Cents, key string) (billing.Refund, error) {
	p.mu.Lock()
	down := p.down
	p.mu.Unlock()
	if down {
		return billing.Refund{}, &billing.Error{Op: "refund", Retryable: true, Err: errors.New("processor down")}
	}
	return p.Processor.Refund(ctx, pi, amount, key)
}

// Two buyers race for one listing of a reservation not yet started, sold
// whole: one wins, the other's payment is refunded in full — through the
// retrier, as refunds fail at first — and so is the seller's credit.
func TestResaleRaceRefundsTheLoser(t *testing.T) {
	var proc *flakyRefunds
	f := newFixture(t, func(l *billing.Local) billing.Processor {
		proc = &flakyRefunds{Processor: l, down: true}
		proc.barrier.Add(2)
		return proc
	})
	start := t0.Add(48 * time.Hour)
	r := f.book(start)
	f.pay(r)
	a, b := f.user("a@example.com"), f.user("b@example.com")
	f.saveCard(a.ID, "4242 4242 4242 4242")
	f.saveCard(b.ID, "5555 5555 5555 4444")
	l, err := f.wf.ListRemainingTime(f.ctx, f.buyer.ID, r.ID, start, 19920)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, u := range []market.User{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = f.wf.BuyResale(f.ctx, u.ID, l.ID)
		}()
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("race results %v, %v: want exactly one sale", errs[0], errs[1])
	}
	loser := b
	if errs[0] != nil {
		loser = a
	}
	pending, err := f.db.ListDueResaleRefunds(f.ctx, time.Time{})
	if err != nil || len(pending) != 1 || pending[0].BuyerID != loser.ID || pending[0].Amount != 19920 {
		t.Fatalf("pending refunds = %+v, %v", pending, err)
	}
	diffs, err := f.wf.Reconcile(f.ctx, ReconcileOptions{})
	if err != nil || len(diffs) != 2 {
		t.Fatalf("reconcile while refunds are down = %+v, %v; want the credit and the refund owed", diffs, err)
	}
	proc.mu.Lock()
	proc.down = false
	proc.mu.Unlock()
	f.tick(f.now.Add(10 * time.Minute))
	if got := f.ledgerSum(r.ID, market.EntryRefund); got != 19920+19920-1992 {
		t.Fatalf("refunds = %s, want the loser's 199.20 and the seller's 179.28", got)
	}
	if !f.notified(loser.ID, "refunded in full") {
		t.Fatal("loser not told of the refund")
	}
	cs, err := f.db.ListAllCommitments(f.ctx, f.now)
	if err != nil || len(cs) != 1 || cs[0].OfferID != f.offer.ID {
		t.Fatalf("commitments = %+v, %v; want the original's one piece", cs, err)
	}
	winner := a
	if loser.ID == a.ID {
		winner = b
	}
	f.tick(start.Add(time.Minute))
	if f.notified(f.buyer.ID, "has started") || !f.notified(winner.ID, "has started") {
		t.Fatal("the start should be announced to the buyer of the time only")
	}
	f.requireReconciled()
}

// An outage in the resold hours is the new holder's: reported on their
// piece, it settles with the original under its terms, on the holder's
// part of it (docs/settlement.md), funded by the provider as any credit,
// and the credit is refunded to the new holder. Figures by hand: the
// holder's part is the last 6 of 10 h, 19,920 × 6/10 = 11,952¢ for 48
// device-hours; 2 of 8 devices down for 1 h is 2 of them, pro rata
// 11,952 × 2/48 = 498¢; the part's uptime 46/48 = 95.83% is below 99% →
// the 25% tier, 2,988¢; 3,486¢ under the 50% cap of the part (5,976¢).
// It is less than the 9,999¢ the holder paid, so all of it is theirs; the
// seller's own hours had no incident, so nothing comes back to the seller
// from the statement. The provider keeps 19,920 − 3,486 = 16,434¢: fee
// 1,643.4 → 1,643¢, payout 14,791¢.
func TestResaleSLACreditGoesToTheNewHolder(t *testing.T) {
	f := newFixture(t, nil)
	f.onboard()
	start := t0.Add(2 * time.Hour)
	r := f.book(start)
	f.pay(r)
	second := f.user("second@example.com")
	f.saveCard(second.ID, "4242 4242 4242 4242")
	f.tick(start.Add(3*time.Hour + 10*time.Minute))
	from := start.Add(4 * time.Hour)
	l, err := f.wf.ListRemainingTime(f.ctx, f.buyer.ID, r.ID, from, 9999)
	if err != nil {
		t.Fatal(err)
	}
	n, err := f.wf.BuyResale(f.ctx, second.ID, l.ID)
	if err != nil {
		t.Fatal(err)
	}
	f.tick(start.Add(8 * time.Hour))
	// The seller cannot report the buyer's hours on their own piece.
	late := store.Incident{Incident: market.Incident{PieceID: r.Pieces[0].ID, Kind: market.IncidentHostFailure,
		Start: start.Add(6 * time.Hour), End: start.Add(7 * time.Hour), DevicesAffected: 2, Note: "down"},
		ReservationID: r.ID, ReportedBy: store.ReportedByBuyer, ReporterID: f.buyer.ID}
	if _, err := f.db.ReportIncident(f.ctx, late, f.now); market.ErrorCode(err) != market.CodeInvalid {
		t.Fatalf("seller reporting resold hours: %v, want invalid", err)
	}
	inc := store.Incident{Incident: market.Incident{PieceID: n.Pieces[0].ID, Kind: market.IncidentHostFailure,
		Start: start.Add(6 * time.Hour), End: start.Add(7 * time.Hour), DevicesAffected: 2, Note: "PSU"},
		ReservationID: n.ID, ReportedBy: store.ReportedByProvider, ReporterID: f.prov.ID}
	if _, err := f.db.ReportIncident(f.ctx, inc, f.now); err != nil {
		t.Fatal(err)
	}

	f.tick(start.Add(10 * time.Hour))
	f.tick(start.Add(10*time.Hour + time.Minute))
	st := f.settlement(r.ID)
	if st.State != store.SettlementDone || st.RefundCents != 0 || len(st.Transfers) != 1 || st.Transfers[0].Amount != 14791 ||
		st.Statement.Refund != 3486 || st.Statement.ResaleCredit != 3486 || st.Statement.Fee != 1643 {
		t.Fatalf("settlement = %+v (statement refund %s, resale credit %s, fee %s)", st, st.Statement.Refund, st.Statement.ResaleCredit, st.Statement.Fee)
	}
	es, err := f.db.ListLedger(f.ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	var toSecond, toSeller market.Cents
	for _, e := range es {
		if e.Kind == market.EntryRefund && e.Debit == market.BuyerAccount(second.ID) {
			toSecond += e.Amount
		}
		if e.Kind == market.EntryRefund && e.Debit == market.BuyerAccount(f.buyer.ID) {
			toSeller += e.Amount
		}
	}
	if toSecond != 3486 || toSeller != 8999 {
		t.Fatalf("refunds: %s to the new holder, %s to the seller; want 34.86 and the 89.99 credit", toSecond, toSeller)
	}
	ls, err := f.db.ListReservationResales(f.ctx, n.ID)
	if err != nil || len(ls) != 1 || ls[0].SLACredit != 3486 || !ls[0].SLACreditDone {
		t.Fatalf("the sale's SLA credit = %+v, %v; want 34.86 refunded", ls, err)
	}
	if !f.notified(second.ID, "$34.86 of SLA credits") {
		t.Fatal("new holder not told of the credit")
	}
	b := f.balance(r.ID)
	if b[market.BuyerAccount(f.buyer.ID)] != 0 || b[market.BuyerAccount(second.ID)] != 0 || b[market.ProviderAccount(f.prov.ID)] != 0 ||
		b[market.AccountPlatformFees] != -(1643+1000) {
		t.Fatalf("balances = %v", b)
	}
	f.requireReconciled()
}

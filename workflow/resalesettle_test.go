package workflow

import (
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// resell books and pays the fixture's 10-hour reservation (19,920¢) from
// t0+2h, lists its last six hours at 3 h 10 min in — from 4 h in, cap
// 19,920 × 6/10 = 11,952¢ — at price, and sells them to a second buyer.
func (f *fixture) resell(price market.Cents) (orig, bought market.Reservation, second market.User) {
	f.t.Helper()
	start := t0.Add(2 * time.Hour)
	orig = f.book(start)
	f.pay(orig)
	second = f.user("second@example.com")
	f.saveCard(second.ID, "4242 4242 4242 4242")
	f.tick(start.Add(3*time.Hour + 10*time.Minute))
	l, err := f.wf.ListRemainingTime(f.ctx, f.buyer.ID, orig.ID, start.Add(4*time.Hour), price)
	if err != nil {
		f.t.Fatal(err)
	}
	if bought, err = f.wf.BuyResale(f.ctx, second.ID, l.ID); err != nil {
		f.t.Fatal(err)
	}
	return orig, bought, second
}

// refundsTo sums the refunds on reservation id's ledger to userID's card.
func (f *fixture) refundsTo(id, userID int64) (sum market.Cents) {
	f.t.Helper()
	es, err := f.db.ListLedger(f.ctx, id)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, e := range es {
		if e.Kind == market.EntryRefund && e.Debit == market.BuyerAccount(userID) {
			sum += e.Amount
		}
	}
	return sum
}

// An outage in the seller's own hours credits the seller on what they
// paid for those hours, under the tier of their own part's uptime — not
// the whole booking's amount, hours sold included — so the settlement's
// refund fits in what is left on their card. Figures by hand: sold at
// the cap, 11,952¢: fee 10% of it 1,195.2 → 1,195¢, the seller's credit
// 10,757¢, leaving 19,920 − 10,757 = 9,163¢ on their payment. The
// seller's part is the first 4 h: 19,920 − 11,952 = 7,968¢ for 32
// device-hours. All 8 devices down for its first 3 h: 24 of 32
// device-hours lost, pro rata 7,968 × 24/32 = 5,976¢; its uptime 25% is
// below 99% → the 25% tier, 1,992¢; 7,968¢ before the 50% cap of the
// part, 3,984¢. The holder's hours ran clean: nothing to them. The
// provider keeps 19,920 − 3,984 = 15,936¢: fee 1,593.6 → 1,594¢, payout
// 14,342¢. (Before: the tier on the whole 19,920¢ made a refund of
// 9,960¢ that the card could not take back.)
func TestResoldSettlementCreditsTheSellersHoursOnTheirPart(t *testing.T) {
	f := newFixture(t, nil)
	f.onboard()
	r, _, second := f.resell(11952)
	start := r.Pieces[0].Start
	inc := store.Incident{Incident: market.Incident{PieceID: r.Pieces[0].ID, Kind: market.IncidentHostFailure,
		Start: start, End: start.Add(3 * time.Hour), DevicesAffected: 8, Note: "rack down"},
		ReservationID: r.ID, ReportedBy: store.ReportedByProvider, ReporterID: f.prov.ID}
	if _, err := f.db.ReportIncident(f.ctx, inc, f.now); err != nil {
		t.Fatal(err)
	}
	f.tick(start.Add(10 * time.Hour))
	f.tick(start.Add(10*time.Hour + time.Minute))
	st := f.settlement(r.ID)
	if st.State != store.SettlementDone || st.RefundCents != 3984 || st.Statement.ResaleCredit != 0 || st.Statement.Refund != 3984 ||
		st.Statement.Fee != 1594 || len(st.Transfers) != 1 || st.Transfers[0].Amount != 14342 {
		t.Fatalf("settlement %s: refund %s, statement refund %s, resale credit %s, fee %s, transfers %+v (last error %q)",
			st.State, st.RefundCents, st.Statement.Refund, st.Statement.ResaleCredit, st.Statement.Fee, st.Transfers, st.LastError)
	}
	if got := f.refundsTo(r.ID, f.buyer.ID); got != 10757+3984 {
		t.Fatalf("refunded to the seller %s, want the credit 107.57 and 39.84", got)
	}
	if got := f.refundsTo(r.ID, second.ID); got != 0 {
		t.Fatalf("refunded to the holder %s, want nothing", got)
	}
	b := f.balance(r.ID)
	if b[market.BuyerAccount(f.buyer.ID)] != 0 || b[market.BuyerAccount(second.ID)] != 0 || b[market.ProviderAccount(f.prov.ID)] != 0 ||
		b[market.AccountPlatformFees] != -(1594+1195) {
		t.Fatalf("balances = %v", b)
	}
	f.requireReconciled()
}

// The holder's hours' credits are the holder's up to what they paid; the
// rest goes back to the seller, who paid the provider for those hours.
// Figures by hand: sold for 1,000¢ (fee 100¢, the seller's credit 900¢).
// The holder's part is the last 6 h, 11,952¢ for 48 device-hours; all 8
// devices down from 5 h to 8 h in: 24 of 48 lost, pro rata 5,976¢; its
// uptime 50% → the 25% tier, 2,988¢; 8,964¢, capped at 50% of the part,
// 5,976¢. The holder gets 1,000¢, what they paid; the seller the other
// 4,976¢ (with the credit, 5,876¢ of their 19,920¢). The provider keeps
// 19,920 − 5,976 = 13,944¢: fee 1,394.4 → 1,394¢, payout 12,550¢.
func TestResoldHoldersCreditIsCappedAtWhatTheyPaid(t *testing.T) {
	f := newFixture(t, nil)
	f.onboard()
	r, n, second := f.resell(1000)
	start := r.Pieces[0].Start
	f.tick(start.Add(8 * time.Hour))
	inc := store.Incident{Incident: market.Incident{PieceID: n.Pieces[0].ID, Kind: market.IncidentHostFailure,
		Start: start.Add(5 * time.Hour), End: start.Add(8 * time.Hour), DevicesAffected: 8, Note: "rack down"},
		ReservationID: n.ID, ReportedBy: store.ReportedByProvider, ReporterID: f.prov.ID}
	if _, err := f.db.ReportIncident(f.ctx, inc, f.now); err != nil {
		t.Fatal(err)
	}
	f.tick(start.Add(10 * time.Hour))
	f.tick(start.Add(10*time.Hour + time.Minute))
	st := f.settlement(r.ID)
	if st.State != store.SettlementDone || st.RefundCents != 4976 || st.Statement.ResaleCredit != 1000 || st.Statement.Refund != 5976 ||
		st.Statement.Fee != 1394 || len(st.Transfers) != 1 || st.Transfers[0].Amount != 12550 {
		t.Fatalf("settlement %s: refund %s, statement refund %s, resale credit %s, fee %s, transfers %+v (last error %q)",
			st.State, st.RefundCents, st.Statement.Refund, st.Statement.ResaleCredit, st.Statement.Fee, st.Transfers, st.LastError)
	}
	if got, want := f.refundsTo(r.ID, second.ID), market.Cents(1000); got != want {
		t.Fatalf("refunded to the holder %s, want %s", got, want)
	}
	if got, want := f.refundsTo(r.ID, f.buyer.ID), market.Cents(900+4976); got != want {
		t.Fatalf("refunded to the seller %s, want %s", got, want)
	}
	b := f.balance(r.ID)
	if b[market.BuyerAccount(f.buyer.ID)] != 0 || b[market.BuyerAccount(second.ID)] != 0 || b[market.ProviderAccount(f.prov.ID)] != 0 ||
		b[market.AccountPlatformFees] != -(1394+100) {
		t.Fatalf("balances = %v", b)
	}
	f.requireReconciled()
}

// A refund that fails does not hold back the same settlement's transfer,
// and is retried with backoff until it goes through. Figures by hand as
// in the scripted run: refund 5,478¢, payout 12,998¢.
func TestSettlementRefundFailureDoesNotBlockTransfers(t *testing.T) {
	var proc *flakyRefunds
	f := newFixture(t, func(l *billing.Local) billing.Processor {
		proc = &flakyRefunds{Processor: l, down: true}
		return proc
	})
	f.onboard()
	start := t0.Add(2 * time.Hour)
	r := f.book(start)
	f.pay(r)
	f.tick(start.Add(time.Hour))
	f.outage(r)
	f.tick(start.Add(10*time.Hour + time.Minute))
	st := f.settlement(r.ID)
	if st.RefundDone || st.State != store.SettlementPending || st.Attempts != 1 || st.LastError == "" ||
		len(st.Transfers) != 1 || st.Transfers[0].State != store.TransferDone || st.Transfers[0].Amount != 12998 {
		t.Fatalf("after a failed refund: %s, refund done %v, attempts %d, error %q, transfers %+v", st.State, st.RefundDone, st.Attempts, st.LastError, st.Transfers)
	}
	if got := f.ledgerSum(r.ID, market.EntryTransfer); got != 12998 {
		t.Fatalf("transferred %s, want 129.98 despite the failed refund", got)
	}
	proc.mu.Lock()
	proc.down = false
	proc.mu.Unlock()
	f.tick(f.now.Add(10 * time.Second)) // before the backoff: not tried yet
	if st := f.settlement(r.ID); st.RefundDone || st.Attempts != 1 {
		t.Fatalf("retried before the backoff: refund done %v, attempts %d", st.RefundDone, st.Attempts)
	}
	f.tick(f.now.Add(time.Minute))
	st = f.settlement(r.ID)
	if !st.RefundDone || st.State != store.SettlementDone || f.ledgerSum(r.ID, market.EntryRefund) != 5478 {
		t.Fatalf("after the retry: %s, refund done %v, refunds %s", st.State, st.RefundDone, f.ledgerSum(r.ID, market.EntryRefund))
	}
	f.requireReconciled()
}

// The dispute-credit limit counts every refund on the payment, the
// seller's credit from a resale included. Figures by hand: 19,920¢ paid,
// last six hours sold for 9,999¢ (fee 1,000¢, credit 8,999¢), no
// incidents, so the statement refunds nothing: at most 19,920 − 8,999 =
// 10,921¢ more. Granted in full, it comes from the frozen payout of
// 19,920 − 1,992 = 17,928¢: the provider keeps 19,920 − 10,921 = 8,999¢,
// fee 899.9 → 900¢, payout 8,099¢.
func TestDisputeLimitCountsTheResaleCredit(t *testing.T) {
	f := newFixture(t, nil)
	f.onboard()
	r, _, second := f.resell(9999)
	d, err := f.db.OpenDispute(f.ctx, f.buyer.ID, r.ID, market.DisputeCharge, "Charged for hours I never used.", f.now)
	if err != nil {
		t.Fatal(err)
	}
	start := r.Pieces[0].Start
	f.tick(start.Add(10 * time.Hour))
	f.tick(start.Add(10*time.Hour + time.Minute))
	limit, err := f.db.FindDisputeCreditLimit(f.ctx, d.ID)
	if err != nil || limit.Max != 10921 {
		t.Fatalf("limit = %+v, %v; want 109.21", limit, err)
	}
	if _, _, err := f.wf.DecideDispute(f.ctx, f.admin.ID, d.ID, 10922, "Too much."); market.ErrorCode(err) != market.CodeInvalid {
		t.Fatalf("a credit 1¢ over what is left on the payment: %v, want invalid", err)
	}
	if _, refunded, err := f.wf.DecideDispute(f.ctx, f.admin.ID, d.ID, 10921, "Upheld."); err != nil || !refunded {
		t.Fatalf("the largest credit: refunded %v, %v", refunded, err)
	}
	st := f.settlement(r.ID)
	if st.State != store.SettlementDone || len(st.Transfers) != 1 || st.Transfers[0].Amount != 8099 {
		t.Fatalf("settlement %s transfers %+v", st.State, st.Transfers)
	}
	if got := f.refundsTo(r.ID, f.buyer.ID); got != 19920 {
		t.Fatalf("refunded to the seller %s, want all 199.20", got)
	}
	b := f.balance(r.ID)
	if b[market.BuyerAccount(f.buyer.ID)] != 0 || b[market.BuyerAccount(second.ID)] != 0 || b[market.ProviderAccount(f.prov.ID)] != 0 ||
		b[market.AccountPlatformFees] != -(900+1000) || b[market.AccountPlatformLosses] != 0 {
		t.Fatalf("balances = %v", b)
	}
	f.requireReconciled()
}

// A dispute on time bought on resale is the holder's: it freezes the
// original's payouts, and a credit is refunded on the holder's own
// payment, at most what they paid less what was refunded to them, taken
// from the provider as any credit. Figures by hand: the last six hours
// sold for 9,999¢ (fee 1,000¢, the seller's credit 8,999¢), no incidents:
// the statement refunds nothing and the payout, 19,920 − 1,992 = 17,928¢,
// waits. At most 9,999¢; granted in full, the provider keeps
// 19,920 − 9,999 = 9,921¢: fee 992.1 → 992¢, payout 8,929¢.
func TestDisputeOnBoughtTimeCreditsTheHolder(t *testing.T) {
	f := newFixture(t, nil)
	f.onboard()
	r, n, second := f.resell(9999)
	d, err := f.db.OpenDispute(f.ctx, second.ID, n.ID, market.DisputeNotAsListed, "Two GPUs were slower than listed.", f.now)
	if err != nil {
		t.Fatal(err)
	}
	start := r.Pieces[0].Start
	f.tick(start.Add(10 * time.Hour))
	f.tick(start.Add(10*time.Hour + time.Minute))
	st := f.settlement(r.ID)
	if len(st.Transfers) != 1 || st.Transfers[0].State != store.TransferFrozen || st.Transfers[0].Amount != 17928 {
		t.Fatalf("payouts while the holder's dispute is open = %+v, want 179.28 frozen", st.Transfers)
	}
	if limit, err := f.db.FindDisputeCreditLimit(f.ctx, d.ID); err != nil || limit.Max != 9999 {
		t.Fatalf("limit = %+v, %v; want 99.99", limit, err)
	}
	if _, _, err := f.wf.DecideDispute(f.ctx, f.admin.ID, d.ID, 10000, "Too much."); market.ErrorCode(err) != market.CodeInvalid {
		t.Fatalf("a credit over what the holder paid: %v, want invalid", err)
	}
	if _, refunded, err := f.wf.DecideDispute(f.ctx, f.admin.ID, d.ID, 9999, "Upheld."); err != nil || !refunded {
		t.Fatalf("the holder's credit: refunded %v, %v", refunded, err)
	}
	st = f.settlement(r.ID)
	if st.State != store.SettlementDone || st.Transfers[0].Amount != 8929 || st.Transfers[0].State != store.TransferDone {
		t.Fatalf("settlement %s transfers %+v", st.State, st.Transfers)
	}
	if got := f.refundsTo(r.ID, second.ID); got != 9999 {
		t.Fatalf("refunded to the holder %s, want 99.99", got)
	}
	if got := f.refundsTo(r.ID, f.buyer.ID); got != 8999 {
		t.Fatalf("refunded to the seller %s, want the credit 89.99 alone", got)
	}
	b := f.balance(r.ID)
	if b[market.BuyerAccount(f.buyer.ID)] != 0 || b[market.BuyerAccount(second.ID)] != 0 || b[market.ProviderAccount(f.prov.ID)] != 0 ||
		b[market.AccountPlatformFees] != -(992+1000) || b[market.AccountPlatformLosses] != 0 {
		t.Fatalf("balances = %v", b)
	}
	f.requireReconciled()
}

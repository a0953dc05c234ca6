package workflow

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/store/pgtest"
)

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

const feeBP = 1000 // 10%

// fixture is a marketplace on a real SQLite file with the local test
// processor over the same database, one provider with an offer, one buyer,
// an admin, and a clock the test moves.
type fixture struct {
	t      *testing.T
	ctx    context.Context
	db     *store.DB
	local  *billing.Local
	proc   billing.Processor // what the workflow calls; local unless wrapped
	wf     *Service
	now    time.Time
	prov   market.User
	buyer  market.User
	admin  market.User
	offer  market.Offer
	nextID int
}

func newFixture(t *testing.T, wrap func(*billing.Local) billing.Processor) *fixture {
	t.Helper()
	return newFixtureAt(t, pgtest.DSN(t, filepath.Join(t.TempDir(), "gpm.db")), wrap)
}

// newFixtureAt is newFixture on the database dsn names.
func newFixtureAt(t *testing.T, dsn string, wrap func(*billing.Local) billing.Processor) *fixture {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	f := &fixture{t: t, ctx: ctx, db: db, now: t0}
	f.local = billing.NewLocal(billing.LocalConfig{Store: db})
	f.proc = f.local
	if wrap != nil {
		f.proc = wrap(f.local)
	}
	user := func(email string, provider bool) market.User {
		u, err := db.CreateUser(ctx, market.User{Email: email, DisplayName: email, IsBuyer: !provider, IsProvider: provider}, []byte("x"), t0)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	f.prov, f.buyer, f.admin = user("prov@example.com", true), user("buyer@example.com", false), user("admin@example.com", false)
	o := market.Offer{
		ProviderID: f.prov.ID, Title: "8× H100 SXM in Oregon", AcceleratorID: "nvidia-h100-80gb-sxm", MemoryGB: 80,
		DevicesPerNode: 8, Nodes: 1, Interconnect: market.InterconnectNVLink, NetworkID: "none", CPUCores: 96, RAMGB: 1024,
		StorageGB: 7680, DriverVersion: "550.54", CUDAVersion: "12.4", OSImage: "Ubuntu 22.04", ContainerRuntime: "Docker 26",
		RegionID: "us-west-or", AvailableFrom: t0, AvailableUntil: t0.Add(90 * 24 * time.Hour), MinRentalHours: 1, MaxRentalHours: 720,
		ProvisioningMins: 15, PriceCentsPerDeviceHour: 249, BillingBasis: market.BillingWallClock, UptimeBP: 9950,
		CreditSchedule: []market.CreditTier{{BelowBP: 9950, CreditBP: 1000}, {BelowBP: 9900, CreditBP: 2500}},
		CreditCapBP:    5000, FreeCancelHours: 24, CancelFeeBP: 1000,
	}
	if f.offer, err = db.CreateOffer(ctx, o, t0); err != nil {
		t.Fatal(err)
	}
	if err := db.ReviewOffer(ctx, f.offer.ID, market.ReviewApproved, "", t0); err != nil {
		t.Fatal(err)
	}
	f.wf, err = New(ctx, Config{Billing: f.proc, PlatformFeeBP: feeBP, Now: func() time.Time { return f.now }}, db, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// book reserves 8 devices for 10 hours from start: 8 × 10 × 249¢ = 19,920¢.
// user signs up a buyer.
func (f *fixture) user(email string) market.User {
	f.t.Helper()
	u, err := f.db.CreateUser(f.ctx, market.User{Email: email, DisplayName: email, IsBuyer: true}, []byte("x"), t0)
	if err != nil {
		f.t.Fatal(err)
	}
	return u
}

func (f *fixture) book(start time.Time) market.Reservation {
	f.t.Helper()
	p := market.ReservationPiece{OfferID: f.offer.ID, Devices: 8, Start: start, End: start.Add(10 * time.Hour), PriceCents: 249, AmountCents: 19920}
	r, err := f.wf.Book(f.ctx, f.buyer.ID, []market.ReservationPiece{p}, `{"version":1}`, 30*time.Minute)
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

// pay pays a held reservation through the local processor's checkout,
// applying its events as the simulated payment page does.
func (f *fixture) pay(r market.Reservation) {
	f.t.Helper()
	f.nextID++
	co, err := f.local.CreateCheckout(f.ctx, billing.CheckoutInput{ReservationID: r.ID, Amount: r.AmountCents, Description: "test",
		SuccessURL: "http://localhost/ok", CancelURL: "http://localhost/cancel", IdempotencyKey: fmt.Sprintf("checkout_%d_%d", r.ID, f.nextID)})
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.db.RecordCheckout(f.ctx, f.buyer.ID, r.ID, co.ID, r.AmountCents, f.now); err != nil && market.ErrorCode(err) != market.CodeConflict {
		f.t.Fatal(err)
	}
	f.apply(f.local.CompleteCheckout(co.ID, true, f.now))
}

func (f *fixture) apply(evs []billing.Event, err error) {
	f.t.Helper()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, ev := range evs {
		if err := f.wf.ApplyEvent(f.ctx, f.wf.log, ev); err != nil {
			f.t.Fatalf("apply %s: %v", ev.StripeType, err)
		}
	}
}

// onboard connects the provider's payouts through the local processor.
func (f *fixture) onboard() {
	f.t.Helper()
	a, err := f.proc.CreateConnectedAccount(f.ctx, f.prov.Email, fmt.Sprintf("provider_%d_account", f.prov.ID))
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.db.CreatePayoutAccount(f.ctx, f.prov.ID, a.ID, f.now); err != nil {
		f.t.Fatal(err)
	}
	ev, err := f.local.CompleteOnboarding(a.ID, f.now)
	f.apply([]billing.Event{ev}, err)
}

// outage reports, as the provider, 2 of 8 devices down for an hour.
func (f *fixture) outage(r market.Reservation) {
	f.t.Helper()
	inc := store.Incident{Incident: market.Incident{PieceID: r.Pieces[0].ID, Kind: market.IncidentHostFailure,
		Start: r.Pieces[0].Start.Add(2 * time.Hour), End: r.Pieces[0].Start.Add(3 * time.Hour), DevicesAffected: 2, Note: "PSU"},
		ReservationID: r.ID, ReportedBy: store.ReportedByProvider, ReporterID: f.prov.ID}
	if _, err := f.db.ReportIncident(f.ctx, inc, f.now); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) tick(at time.Time) {
	f.now = at
	f.wf.Tick(f.ctx, at)
}

func (f *fixture) settlement(id int64) store.Settlement {
	f.t.Helper()
	s, err := f.db.FindSettlement(f.ctx, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

// requireReconciled runs what `gpumarket reconcile` runs, against the
// processor's own records, and requires no difference.
func (f *fixture) requireReconciled() {
	f.t.Helper()
	diffs, err := f.wf.Reconcile(f.ctx, ReconcileOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, d := range diffs {
		f.t.Errorf("reconcile: reservation %d: %s (ledger %s, processor %s)", d.ReservationID, d.What, d.Ledger, d.Processor)
	}
	if len(diffs) > 0 {
		f.t.FailNow()
	}
}

func (f *fixture) balance(id int64) map[string]market.Cents {
	f.t.Helper()
	es, err := f.db.ListLedger(f.ctx, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return market.Balance(es)
}

func (f *fixture) ledgerSum(id int64, kind string) (sum market.Cents) {
	f.t.Helper()
	es, err := f.db.ListLedger(f.ctx, id)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, e := range es {
		if e.Kind == kind {
			sum += e.Amount
		}
	}
	return sum
}

func (f *fixture) notified(userID int64, contains string) bool {
	f.t.Helper()
	ns, err := f.db.ListNotifications(f.ctx, userID, 100)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, n := range ns {
		if strings.Contains(n.Notice.Text(), contains) {
			return true
		}
	}
	return false
}

// The scripted run of the issue: book → pay → incident → settle with the
// payout held → dispute credit → onboarding → payout. Figures by hand from
// the offer's terms: 19,920¢ paid; 2 of 8 devices down 1 h of 10 h is 2.5%
// of the device-time: pro-rata 498¢; uptime 97.5% is below 99% → 25%
// credit, 4,980¢; credits 5,478¢ under the 50% cap. Kept 14,442¢; fee 10%
// 1,444¢; payout 12,998¢. A 689¢ dispute credit comes from the held payout:
// kept 13,753¢, fee 1,375¢, payout 12,378¢.
func TestDisputeCreditOnHeldPayoutReachesTheTransfer(t *testing.T) {
	f := newFixture(t, nil)
	start := t0.Add(48 * time.Hour)
	r := f.book(start)
	f.pay(r)
	f.tick(start.Add(time.Hour))
	f.outage(r)
	f.tick(start.Add(10*time.Hour + time.Minute))

	s := f.settlement(r.ID)
	if s.RefundCents != 5478 || !s.RefundDone || s.State != store.SettlementWaiting || len(s.Transfers) != 1 ||
		s.Transfers[0].State != store.TransferHeld || s.Transfers[0].Amount != 12998 || s.Transfers[0].Fee != 1444 {
		t.Fatalf("settlement = refund %d done %v state %s transfers %+v", s.RefundCents, s.RefundDone, s.State, s.Transfers)
	}
	d, err := f.db.OpenDispute(f.ctx, f.buyer.ID, r.ID, market.DisputeNotAsListed, "Two GPUs were slower than listed.", f.now)
	if err != nil {
		t.Fatal(err)
	}
	got, refunded, err := f.wf.DecideDispute(f.ctx, f.admin.ID, d.ID, 689, "Partly upheld.")
	if err != nil || !refunded || got.RefundState != store.DisputeRefundDone {
		t.Fatalf("decide: %+v refunded %v err %v", got, refunded, err)
	}
	s = f.settlement(r.ID)
	if s.Transfers[0].State != store.TransferHeld || s.Transfers[0].Amount != 12378 || s.Transfers[0].Fee != 1375 {
		t.Fatalf("after the credit the held payout is %+v, want 12378 with fee 1375", s.Transfers[0])
	}
	f.onboard()
	s = f.settlement(r.ID)
	if s.State != store.SettlementDone || s.Transfers[0].State != store.TransferDone || s.Transfers[0].Ref == "" {
		t.Fatalf("after onboarding: state %s transfers %+v", s.State, s.Transfers)
	}
	tr, err := f.local.RetrieveTransfer(f.ctx, s.Transfers[0].Ref)
	if err != nil || tr.Amount != 12378 {
		t.Fatalf("transfer sent %+v, %v; want 12378", tr, err)
	}
	if got := f.ledgerSum(r.ID, market.EntryTransfer); got != 12378 {
		t.Fatalf("ledger transfer %d, want 12378", got)
	}
	if pp := s.Statement.Payouts(); pp[0].Payout != 12378 || pp[0].Fee != 1375 || pp[0].DisputeCredit != 689 {
		t.Fatalf("statement payouts %+v", pp)
	}
	if !f.notified(f.prov.ID, "Payout of $123.78") || f.notified(f.prov.ID, "Payout of $129.98") {
		t.Fatal("the provider's payout notification does not say the amount sent")
	}
	// Before the credit, the statement and the held payout said what was
	// owed then (mail: statement ready, payout held).
	if !f.notified(f.prov.ID, "your payout is $129.98") || !f.notified(f.prov.ID, "payout of $129.98 for booking") {
		t.Fatal("the provider is not told of the statement and the held payout")
	}
	if !f.notified(f.buyer.ID, "refund of $6.89") || !f.notified(f.buyer.ID, "refund of $54.78") {
		t.Fatal("the buyer is not told of both refunds")
	}
	b := f.balance(r.ID)
	if -b[market.AccountPlatformFees] != 1375 || b[market.AccountPlatformLosses] != 0 || f.ledgerSum(r.ID, market.EntryRefund) != 5478+689 {
		t.Fatalf("fees %d losses %d refunds %d", -b[market.AccountPlatformFees], b[market.AccountPlatformLosses], f.ledgerSum(r.ID, market.EntryRefund))
	}
	f.requireReconciled()
}

// The largest credit the form allows (paid less refunded: 14,442¢) takes
// the whole held payout: nothing is sent, the settlement completes, the fee
// is given back and the books close.
func TestLargestDisputeCreditLeavesNothingToPay(t *testing.T) {
	f := newFixture(t, nil)
	start := t0.Add(48 * time.Hour)
	r := f.book(start)
	f.pay(r)
	f.tick(start.Add(time.Hour))
	f.outage(r)
	f.tick(start.Add(10*time.Hour + time.Minute))
	d, err := f.db.OpenDispute(f.ctx, f.buyer.ID, r.ID, market.DisputeCharge, "Nothing worked.", f.now)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.wf.DecideDispute(f.ctx, f.admin.ID, d.ID, 14443, "Too much."); market.ErrorCode(err) != market.CodeInvalid {
		t.Fatalf("a credit over the maximum: %v", err)
	}
	if _, _, err := f.wf.DecideDispute(f.ctx, f.admin.ID, d.ID, 14442, "Upheld in full."); err != nil {
		t.Fatal(err)
	}
	s := f.settlement(r.ID)
	if s.State != store.SettlementDone || s.Transfers[0].State != store.TransferDone || s.Transfers[0].Amount != 0 || s.Transfers[0].Ref != "" {
		t.Fatalf("settlement %s transfers %+v", s.State, s.Transfers)
	}
	f.onboard() // nothing left to release
	if got := f.ledgerSum(r.ID, market.EntryTransfer); got != 0 {
		t.Fatalf("a transfer of %d was recorded", got)
	}
	if b := f.balance(r.ID); b[market.AccountPlatformFees] != 0 || f.ledgerSum(r.ID, market.EntryRefund) != 19920 {
		t.Fatalf("fees %d refunds %d", -b[market.AccountPlatformFees], f.ledgerSum(r.ID, market.EntryRefund))
	}
	res, _ := f.db.FindReservation(f.ctx, r.ID)
	if res.State != market.ReservationSettled {
		t.Fatalf("reservation %s", res.State)
	}
	f.requireReconciled()
}

// A credit after the payout was sent cannot be taken from it: the platform
// bears it, recorded as a loss.
func TestDisputeCreditAfterPayoutIsThePlatformsLoss(t *testing.T) {
	f := newFixture(t, nil)
	f.onboard()
	start := t0.Add(48 * time.Hour)
	r := f.book(start)
	f.pay(r)
	f.tick(start.Add(10*time.Hour + time.Minute))
	if s := f.settlement(r.ID); s.State != store.SettlementDone || s.Transfers[0].Amount != 19920-1992 {
		t.Fatalf("settlement %+v", s)
	}
	d, err := f.db.OpenDispute(f.ctx, f.buyer.ID, r.ID, market.DisputeCharge, "Charged twice?", f.now)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.wf.DecideDispute(f.ctx, f.admin.ID, d.ID, 1000, "Goodwill."); err != nil {
		t.Fatal(err)
	}
	if b := f.balance(r.ID); b[market.AccountPlatformLosses] != 1000 || -b[market.AccountPlatformFees] != 1992 {
		t.Fatalf("losses %d fees %d", b[market.AccountPlatformLosses], -b[market.AccountPlatformFees])
	}
	f.requireReconciled()
}

// Cancelling a paid reservation refunds it less the fee, pays the fee to the
// provider under the platform fee, and tells both. Inside the 24-hour free
// period: fee 10% of 19,920¢ = 1,992¢, refund 17,928¢, provider payout
// 1,992 − 199 = 1,793¢. Outside it: refunded in full.
func TestCancellingAPaidReservationRefundsLessTheFee(t *testing.T) {
	for _, c := range []struct {
		name                 string
		before               time.Duration
		refund, payout, fees market.Cents
	}{
		{"inside the free window", 10 * time.Hour, 17928, 1793, 199},
		{"outside the free window", 30 * time.Hour, 19920, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, nil)
			f.onboard()
			start := t0.Add(48 * time.Hour)
			r := f.book(start)
			f.pay(r)
			f.now = start.Add(-c.before)
			got, err := f.wf.Cancel(f.ctx, f.buyer.ID, r.ID)
			if err != nil || got.State != market.ReservationCancelled || got.CancelFeeCents != 19920-c.refund {
				t.Fatalf("cancel: %+v, %v", got, err)
			}
			s := f.settlement(r.ID)
			if !s.RefundDone || s.RefundCents != c.refund || s.State != store.SettlementDone || s.Transfers[0].Amount != c.payout {
				t.Fatalf("settlement: refund %d done %v state %s transfers %+v", s.RefundCents, s.RefundDone, s.State, s.Transfers)
			}
			ref, err := f.local.RetrieveRefund(f.ctx, s.RefundRef)
			if err != nil || ref.Amount != c.refund {
				t.Fatalf("processor refund %+v, %v", ref, err)
			}
			if c.payout > 0 {
				tr, err := f.local.RetrieveTransfer(f.ctx, s.Transfers[0].Ref)
				if err != nil || tr.Amount != c.payout {
					t.Fatalf("processor transfer %+v, %v", tr, err)
				}
			}
			if b := f.balance(r.ID); -b[market.AccountPlatformFees] != c.fees {
				t.Fatalf("fees %d, want %d", -b[market.AccountPlatformFees], c.fees)
			}
			if !f.notified(f.buyer.ID, "refund of "+c.refund.String()) || !f.notified(f.prov.ID, "cancelled booking") {
				t.Fatal("both parties are not told")
			}
			f.tick(start.Add(11 * time.Hour))
			if res, _ := f.db.FindReservation(f.ctx, r.ID); res.State != market.ReservationCancelled {
				t.Fatalf("state after the end: %s", res.State)
			}
			f.requireReconciled()
		})
	}
}

// flaky fails the first n refunds with a retryable error, as a processor
// outage would; everything else goes to the local processor.
type flaky struct {
	*billing.Local
	failRefunds int
}

func (p *flaky) Refund(ctx context.Context, pi string, amount market.Cents, key string) (billing.Refund, error) {
	if p.failRefunds > 0 {
		p.failRefunds--
		return billing.Refund{}, &billing.Error{Op: "refund", Status: 503, Retryable: true, Err: fmt.Errorf("processor unavailable")}
	}
	return p.Local.Refund(ctx, pi, amount, key)
}

// A crash (or an outage) between the cancellation and its refund loses
// nothing: reconciliation shows the refund owed until the retrier makes it.
func TestCancelledRefundIsRetried(t *testing.T) {
	fl := &flaky{}
	f := newFixture(t, func(l *billing.Local) billing.Processor { fl.Local = l; return fl })
	start := t0.Add(48 * time.Hour)
	r := f.book(start)
	f.pay(r)
	fl.failRefunds = 1
	f.now = start.Add(-30 * time.Hour)
	if _, err := f.wf.Cancel(f.ctx, f.buyer.ID, r.ID); err != nil {
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
	if s := f.settlement(r.ID); !s.RefundDone || s.State != store.SettlementDone || s.RefundCents != 19920 {
		t.Fatalf("after the retry: %+v", s)
	}
	f.requireReconciled()
}

// penny is a processor that also holds a 1¢ payment a buyer made outside the
// checkout, as a forged or mistaken payment would be.
type penny struct {
	*billing.Local
	refunded market.Cents
}

func (p *penny) RetrievePayment(ctx context.Context, id string) (billing.Payment, error) {
	if id == "pi_penny" {
		return billing.Payment{ID: id, Amount: 1, AmountReceived: 1, Status: "succeeded", Succeeded: true}, nil
	}
	return p.Local.RetrievePayment(ctx, id)
}

func (p *penny) Refund(ctx context.Context, pi string, amount market.Cents, key string) (billing.Refund, error) {
	if pi == "pi_penny" {
		p.refunded += amount
		return billing.Refund{ID: "re_penny", PaymentIntentID: pi, Amount: amount, Status: "succeeded"}, nil
	}
	return p.Local.Refund(ctx, pi, amount, key)
}

func (p *penny) RetrieveRefund(ctx context.Context, id string) (billing.Refund, error) {
	if id == "re_penny" {
		return billing.Refund{ID: id, PaymentIntentID: "pi_penny", Amount: p.refunded, Status: "succeeded"}, nil
	}
	return p.Local.RetrieveRefund(ctx, id)
}

// A payment that is not what the checkout asked for never confirms a
// reservation: a 1¢ payment and a second payment of an already-paid
// reservation are both recorded and refunded in full.
func TestMismatchedPaymentsAreRefunded(t *testing.T) {
	pn := &penny{}
	f := newFixture(t, func(l *billing.Local) billing.Processor { pn.Local = l; return pn })
	r := f.book(t0.Add(48 * time.Hour))
	f.apply([]billing.Event{{ID: "evt_penny", Type: billing.EventPaymentSucceeded, StripeType: "payment_intent.succeeded",
		ReservationID: r.ID, PaymentIntentID: "pi_penny", AmountCents: 1, Currency: "usd"}}, nil)
	if res, _ := f.db.FindReservation(f.ctx, r.ID); res.State != market.ReservationHeld {
		t.Fatalf("a 1¢ payment made the reservation %s", res.State)
	}
	if pn.refunded != 1 {
		t.Fatalf("refunded %d of the 1¢ payment", pn.refunded)
	}
	f.pay(r)
	f.pay(r) // a second checkout paid as well
	res, _ := f.db.FindReservation(f.ctx, r.ID)
	ps, _ := f.db.ListPaymentExceptions(f.ctx)
	if res.State != market.ReservationConfirmed || len(ps) != 2 || ps[1].Amount != 19920 || ps[1].State != store.PaymentRefunded {
		t.Fatalf("reservation %s, exceptions %+v", res.State, ps)
	}
	if f.ledgerSum(r.ID, market.EntryCharge) != 1+19920+19920 || f.ledgerSum(r.ID, market.EntryRefund) != 1+19920 {
		t.Fatalf("charges %d refunds %d", f.ledgerSum(r.ID, market.EntryCharge), f.ledgerSum(r.ID, market.EntryRefund))
	}
	f.requireReconciled()
}

// A chargeback is recorded when the bank takes the money, is decided only
// once the bank has ruled, and then splits what the bank kept between the
// provider (from the frozen payout) and the platform.
func TestChargebacks(t *testing.T) {
	run := func(t *testing.T, outcome string) (*fixture, market.Reservation) {
		f := newFixture(t, nil)
		start := t0.Add(48 * time.Hour)
		r := f.book(start)
		f.pay(r)
		f.tick(start.Add(10*time.Hour + time.Minute)) // settled, payout held: 17,928¢
		p, _ := f.db.FindPayment(f.ctx, r.ID)
		f.apply([]billing.Event{{ID: "evt_dp", Type: billing.EventDisputeCreated, StripeType: "charge.dispute.created",
			ReservationID: r.ID, PaymentIntentID: p.PaymentIntentID, DisputeID: "dp_1", AmountCents: 19920, Currency: "usd"}}, nil)
		if s := f.settlement(r.ID); s.Transfers[0].State != store.TransferFrozen {
			t.Fatalf("payout not frozen: %+v", s.Transfers)
		}
		if got := f.ledgerSum(r.ID, market.EntryChargeback); got != 19920 {
			t.Fatalf("chargeback entries %d", got)
		}
		ds, _ := f.db.ListOpenDisputes(f.ctx)
		if _, _, err := f.wf.DecideDispute(f.ctx, f.admin.ID, ds[0].ID, 0, "Too early."); market.ErrorCode(err) != market.CodeConflict {
			t.Fatalf("deciding before the bank ruled: %v", err)
		}
		f.apply([]billing.Event{{ID: "evt_dp_closed", Type: billing.EventDisputeClosed, StripeType: "charge.dispute.closed",
			ReservationID: r.ID, DisputeID: "dp_1", DisputeStatus: outcome, AmountCents: 19920, Currency: "usd"}}, nil)
		f.onboard()
		return f, r
	}
	t.Run("won", func(t *testing.T) {
		f, r := run(t, store.BankWon)
		s := f.settlement(r.ID)
		if s.State != store.SettlementDone || s.Transfers[0].Amount != 17928 {
			t.Fatalf("after the bank ruled for the platform: %+v", s)
		}
		if f.ledgerSum(r.ID, market.EntryChargebackReversal) != 19920 {
			t.Fatal("no reversal entry")
		}
		f.requireReconciled()
	})
	t.Run("lost", func(t *testing.T) {
		f, r := run(t, store.BankLost)
		ds, _ := f.db.ListOpenDisputes(f.ctx)
		// The provider bears 5,000¢: payout 19,920 − 5,000 = 14,920 kept,
		// fee 1,492, payout 13,428; the platform bears 14,920¢.
		if _, _, err := f.wf.DecideDispute(f.ctx, f.admin.ID, ds[0].ID, 5000, "Half a day not delivered."); err != nil {
			t.Fatal(err)
		}
		s := f.settlement(r.ID)
		if s.State != store.SettlementDone || s.Transfers[0].Amount != 13428 {
			t.Fatalf("after the decision: %+v", s.Transfers)
		}
		b := f.balance(r.ID)
		if b[market.AccountPlatformLosses] != 14920 || -b[market.AccountPlatformFees] != 1492 || f.ledgerSum(r.ID, market.EntryRefund) != 0 {
			t.Fatalf("losses %d fees %d refunds %d", b[market.AccountPlatformLosses], -b[market.AccountPlatformFees], f.ledgerSum(r.ID, market.EntryRefund))
		}
		f.requireReconciled()
	})
}

// Reconciliation sees what is owed: a failed settlement is a difference.
func TestReconcileReportsFailedSettlements(t *testing.T) {
	fl := &flaky{}
	f := newFixture(t, func(l *billing.Local) billing.Processor { fl.Local = l; return fl })
	start := t0.Add(48 * time.Hour)
	r := f.book(start)
	f.pay(r)
	f.tick(start.Add(time.Hour))
	f.outage(r)
	fl.failRefunds = 100
	at := start.Add(10*time.Hour + time.Minute)
	for i := 0; i < SettlementMaxAttempts; i++ {
		f.tick(at)
		at = at.Add(2 * time.Hour)
	}
	if s := f.settlement(r.ID); s.State != store.SettlementFailed {
		t.Fatalf("state %s after %d attempts", s.State, s.Attempts)
	}
	diffs, err := f.wf.Reconcile(f.ctx, ReconcileOptions{})
	if err != nil || len(diffs) == 0 || !strings.Contains(diffs[0].What, "settlement failed") {
		t.Fatalf("reconcile: %+v, %v", diffs, err)
	}
	fl.failRefunds = 0
	if err := f.wf.RetrySettlement(f.ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	f.onboard()
	f.requireReconciled()
}

// Run stops when its context ends and returns, so the process owner can
// close the database after it.
func TestRunStopsWithItsContext(t *testing.T) {
	f := newFixture(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.wf.Run(ctx, time.Millisecond); close(done) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// A checkout ends with its hold: once the hold expires (or the held
// reservation is cancelled) the checkout can no longer be paid.
func TestCheckoutExpiresWithTheHold(t *testing.T) {
	f := newFixture(t, nil)
	for i, end := range []func(r market.Reservation){
		func(market.Reservation) { f.tick(f.now.Add(31 * time.Minute)) },
		func(r market.Reservation) {
			if _, err := f.wf.Cancel(f.ctx, f.buyer.ID, r.ID); err != nil {
				t.Fatal(err)
			}
		},
	} {
		r := f.book(t0.Add(time.Duration(48+24*i) * time.Hour))
		co, err := f.local.CreateCheckout(f.ctx, billing.CheckoutInput{ReservationID: r.ID, Amount: r.AmountCents, Description: "test",
			SuccessURL: "http://localhost/ok", CancelURL: "http://localhost/cancel", IdempotencyKey: fmt.Sprintf("checkout_%d", r.ID)})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.db.RecordCheckout(f.ctx, f.buyer.ID, r.ID, co.ID, r.AmountCents, f.now); err != nil {
			t.Fatal(err)
		}
		end(r)
		got, err := f.local.RetrieveCheckout(f.ctx, co.ID)
		if err != nil || got.Status != "expired" {
			t.Fatalf("case %d: checkout %+v, %v; want expired", i, got, err)
		}
		if _, err := f.local.CompleteCheckout(co.ID, true, f.now); market.ErrorCode(err) != market.CodeConflict {
			t.Fatalf("case %d: paying an expired checkout: %v", i, err)
		}
	}
	f.requireReconciled()
}

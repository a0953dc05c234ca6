package workflow

import (
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/store/pgtest"
)

// replacementFixture adds a second provider with a cheaper offer like the
// fixture's (1 node × 8 H100, 199¢), and books and pays, as the buyer,
// the fixture's offer whole for 10 hours from start (19,920¢) with the
// replacement policy given; it returns the second provider, their offer
// and the reservation.
func replacementFixture(t *testing.T, policy market.ReplacementPolicy, start time.Time) (*fixture, market.User, market.Offer, market.Reservation) {
	return replacementFixtureAt(t, pgtest.DSN(t, filepath.Join(t.TempDir(), "gpm.db")), policy, start)
}

// replacementFixtureAt is replacementFixture on the database dsn names.
func replacementFixtureAt(t *testing.T, dsn string, policy market.ReplacementPolicy, start time.Time) (*fixture, market.User, market.Offer, market.Reservation) {
	return replacementFixtureWith(t, dsn, nil, market.Replacement{Policy: policy}, 199, start)
}

// replacementFixtureWith is replacementFixture on the database dsn names,
// through the processor wrap makes (nil: the local one), with the
// replacement terms repl and the second provider's price.
func replacementFixtureWith(t *testing.T, dsn string, wrap func(*billing.Local) billing.Processor, repl market.Replacement, price market.Cents,
	start time.Time) (*fixture, market.User, market.Offer, market.Reservation) {
	f := newFixtureAt(t, dsn, wrap)
	prov2, err := f.db.CreateUser(f.ctx, market.User{Email: "prov2@example.com", DisplayName: "prov2", IsProvider: true}, []byte("x"), t0)
	if err != nil {
		t.Fatal(err)
	}
	o := f.offer
	o.ID, o.ProviderID, o.Title, o.PriceCentsPerDeviceHour = 0, prov2.ID, "8× H100 SXM, the other provider", price
	o2, err := f.db.CreateOffer(f.ctx, o, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.db.ReviewOffer(f.ctx, o2.ID, market.ReviewApproved, "", t0); err != nil {
		t.Fatal(err)
	}
	if err := f.wf.ReloadIndex(f.ctx); err != nil {
		t.Fatal(err)
	}
	req := market.Request{Workload: market.Workload{Kind: market.WorkTraining, Devices: 8, Hours: 10},
		Constraints: market.Constraints{Countries: []string{"US"}}, Replacement: repl}
	js, err := market.EncodeRequestJSON(req)
	if err != nil {
		t.Fatal(err)
	}
	p := market.ReservationPiece{OfferID: f.offer.ID, Devices: 8, Start: start, End: start.Add(10 * time.Hour), PriceCents: 249, AmountCents: 19920, Gang: true}
	r, err := f.wf.Book(f.ctx, f.buyer.ID, []market.ReservationPiece{p}, string(js), 30*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	f.pay(r)
	return f, prov2, o2, r
}

// failHost starts the fixture offer's node 0 agent with heartbeats from
// start to last, then lets it fall silent.
func (f *fixture) failHost(start, last time.Time) {
	f.t.Helper()
	tok, _, err := f.db.CreateHostToken(f.ctx, f.prov.ID, f.offer.ID, 0, t0)
	if err != nil {
		f.t.Fatal(err)
	}
	devs := make([]market.HostDevice, 8)
	for i := range devs {
		devs[i] = market.HostDevice{Index: i, UUID: "GPU-" + string(rune('a'+i)), Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Healthy: true}
	}
	seq := int64(0)
	for at := start; !at.After(last); at = at.Add(30 * time.Second) {
		seq++
		hb := market.Heartbeat{Seq: seq, AgentVersion: "1.0.0", Probe: "simulate", Devices: devs}
		if err := market.ValidateHeartbeat(&hb); err != nil {
			f.t.Fatal(err)
		}
		if _, err := f.db.RecordHeartbeat(f.ctx, tok.ID, hb, at); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *fixture) replacements(resID int64) []store.Replacement {
	f.t.Helper()
	reps, err := f.db.ListReplacements(f.ctx, resID)
	if err != nil {
		f.t.Fatal(err)
	}
	return reps
}

// TestHostFailureBooksOneCheaperReplacement: with the auto policy, a host
// silent past the grace period moves the rental to the other provider's
// cheaper offer at the next tick — once, however often and however
// concurrently the tick runs, and after a restart — the original piece
// ends there for what it delivered, the difference is refunded, the
// outage becomes the incident it is, and the rental settles and
// reconciles.
func TestHostFailureBooksOneCheaperReplacement(t *testing.T) {
	start := t0.Add(time.Hour)
	f, prov2, o2, r := replacementFixture(t, market.ReplaceAuto, start)
	f.tick(start)
	f.failHost(start, start.Add(time.Hour))
	detect := start.Add(time.Hour + 5*time.Minute) // silent 5 minutes: past the 1-minute grace
	f.tick(detect)

	reps := f.replacements(r.ID)
	if len(reps) != 1 || reps[0].State != store.ReplacementBooked || reps[0].Tier != market.TierAnyone || len(reps[0].PieceIDs) != 1 {
		t.Fatalf("replacements %+v", reps)
	}
	// Derived from the terms: 10 h of 8 × 249¢ = 19,920¢; 8 h 55 min
	// (32,100 s) remain: 19,920 × 32,100 / 36,000 = 17,762¢ exactly go to
	// the replacement, 2,158¢ stay for the hour and 5 minutes delivered.
	// The replacement is matched for 9 whole hours, 8 × 9 × 199¢ =
	// 14,328¢, and booked for the 32,100 s: 14,328 × 32,100 / 32,400 =
	// 14,195.33 → 14,195¢. The difference, 17,762 − 14,195 = 3,567¢, is
	// refunded.
	const remaining, delivered, cost, refund = 17762, 2158, 14195, 3567
	if s := reps[0].Split; s.Remaining != remaining || s.Delivered != delivered || s.Cost != cost || s.Refund != refund || s.ProviderShare != 0 || s.BuyerShare != 0 {
		t.Fatalf("split %+v from %s until %s", s, reps[0].From, reps[0].Until)
	}

	// Ticks again, two at once, and after a restart: still one.
	f.tick(detect.Add(10 * time.Second))
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); f.wf.Tick(f.ctx, detect.Add(20*time.Second)) }()
	}
	wg.Wait()
	f.restart()
	f.tick(detect.Add(30 * time.Second))
	if reps := f.replacements(r.ID); len(reps) != 1 {
		t.Fatalf("%d replacements after repeated ticks", len(reps))
	}

	got, err := f.db.FindReservation(f.ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Pieces) != 2 {
		t.Fatalf("pieces %+v", got.Pieces)
	}
	orig, repl := got.Pieces[0], got.Pieces[1]
	if !orig.End.Equal(detect) || orig.AmountCents != delivered || orig.Terms.CreditCapBP != 5000 {
		t.Errorf("original piece %+v", orig)
	}
	if repl.OfferID != o2.ID || repl.ProviderID != prov2.ID || repl.Devices != 8 || !repl.Gang || !repl.Start.Equal(detect) ||
		!repl.End.Equal(start.Add(10*time.Hour)) || repl.AmountCents != cost || repl.PriceCents != 199 || len(repl.Nodes) != 1 {
		t.Errorf("replacement piece %+v", repl)
	}
	if got.AmountCents != 19920-refund {
		t.Errorf("reservation amount %s, want %d", got.AmountCents, 19920-refund)
	}
	if f.ledgerSum(r.ID, market.EntryReplacement) != cost || f.ledgerSum(r.ID, market.EntryRefund) != refund {
		t.Errorf("ledger: replacement %s, refund %s", f.ledgerSum(r.ID, market.EntryReplacement), f.ledgerSum(r.ID, market.EntryRefund))
	}
	if !f.notified(f.buyer.ID, "your rental runs on 8 device(s) on offer #") || !f.notified(prov2.ID, "a replacement after another host failed") {
		t.Error("buyer or new provider not told")
	}

	// The end: the outage is the incident on the original piece up to the
	// replacement's start; both providers are paid; it reconciles.
	f.onboard()
	a, err := f.proc.CreateConnectedAccount(f.ctx, prov2.Email, "provider_2_account")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.CreatePayoutAccount(f.ctx, prov2.ID, a.ID, f.now); err != nil {
		t.Fatal(err)
	}
	ev, err := f.local.CompleteOnboarding(a.ID, f.now)
	f.apply([]billing.Event{ev}, err)
	end := start.Add(10 * time.Hour)
	f.tick(end.Add(time.Minute))
	incs, err := f.db.ListIncidents(f.ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(incs) != 1 || incs[0].Kind != market.IncidentHostFailure || incs[0].PieceID != orig.ID || !incs[0].End.Equal(detect) ||
		!incs[0].Start.Equal(start.Add(time.Hour)) {
		t.Fatalf("incidents %+v", incs)
	}
	for i := 2; i < 8; i++ {
		f.tick(end.Add(time.Duration(i) * time.Hour))
	}
	if st := f.settlement(r.ID); st.State != store.SettlementDone {
		t.Fatalf("settlement %+v", st)
	}
	f.requireReconciled()
}

// TestAskPolicyOffersThenLapsesOrBooks: with ask, the failure offers the
// replacement; confirmed in time it books once; not confirmed, it lapses
// and nothing is booked.
func TestAskPolicyOffersThenLapsesOrBooks(t *testing.T) {
	start := t0.Add(time.Hour)
	for _, confirm := range []bool{true, false} {
		f, _, o2, r := replacementFixture(t, market.ReplaceAsk, start)
		f.tick(start)
		f.failHost(start, start.Add(time.Hour))
		detect := start.Add(time.Hour + 5*time.Minute)
		f.tick(detect)
		reps := f.replacements(r.ID)
		if len(reps) != 1 || reps[0].State != store.ReplacementOffered || !reps[0].OfferExpiresAt.Equal(detect.Add(market.ReplacementOfferTTL)) ||
			!strings.Contains(reps[0].Reason, "8 device(s) on offer #") {
			t.Fatalf("offered %+v", reps)
		}
		if !f.notified(f.buyer.ID, "A replacement is offered") {
			t.Error("buyer not told of the offer")
		}
		if confirm {
			f.now = detect.Add(5 * time.Minute)
			other := f.user("other@example.com")
			if _, err := f.wf.ConfirmReplacement(f.ctx, other.ID, reps[0].ID); market.ErrorCode(err) != market.CodeNotFound {
				t.Fatalf("another buyer confirmed: %v", err)
			}
			rep, err := f.wf.ConfirmReplacement(f.ctx, f.buyer.ID, reps[0].ID)
			if err != nil || rep.State != store.ReplacementBooked || !rep.From.Equal(f.now) {
				t.Fatalf("confirm: %+v %v", rep, err)
			}
			if _, err := f.wf.ConfirmReplacement(f.ctx, f.buyer.ID, reps[0].ID); market.ErrorCode(err) != market.CodeConflict {
				t.Fatalf("confirmed twice: %v", err)
			}
			got, _ := f.db.FindReservation(f.ctx, r.ID)
			if len(got.Pieces) != 2 || got.Pieces[1].OfferID != o2.ID {
				t.Fatalf("pieces after confirming %+v", got.Pieces)
			}
			continue
		}
		f.tick(detect.Add(market.ReplacementOfferTTL))
		reps = f.replacements(r.ID)
		if len(reps) != 1 || reps[0].State != store.ReplacementLapsed {
			t.Fatalf("not lapsed: %+v", reps)
		}
		if _, err := f.wf.ConfirmReplacement(f.ctx, f.buyer.ID, reps[0].ID); market.ErrorCode(err) != market.CodeConflict {
			t.Fatalf("confirmed a lapsed offer: %v", err)
		}
		got, _ := f.db.FindReservation(f.ctx, r.ID)
		if len(got.Pieces) != 1 {
			t.Fatalf("booked after lapsing: %+v", got.Pieces)
		}
	}
}

// TestNeverAndNothingFits: never leaves the rental; auto with nothing that
// fits tells the buyer why, and the rental stays where it is.
func TestNeverAndNothingFits(t *testing.T) {
	start := t0.Add(time.Hour)
	f, _, o2, r := replacementFixture(t, market.ReplaceNever, start)
	f.tick(start)
	f.failHost(start, start.Add(time.Hour))
	f.tick(start.Add(time.Hour + 5*time.Minute))
	if reps := f.replacements(r.ID); len(reps) != 1 || reps[0].State != store.ReplacementNotWanted {
		t.Fatalf("never: %+v", reps)
	}

	f, _, o2, r = replacementFixture(t, market.ReplaceAuto, start)
	if err := f.db.SetOfferState(f.ctx, o2.ProviderID, o2.ID, market.OfferPaused, t0); err != nil {
		t.Fatal(err)
	}
	f.wf.RefreshOffer(f.ctx, o2.ID)
	f.tick(start)
	f.failHost(start, start.Add(time.Hour))
	f.tick(start.Add(time.Hour + 5*time.Minute))
	reps := f.replacements(r.ID)
	if len(reps) != 1 || reps[0].State != store.ReplacementUnfilled || !strings.Contains(reps[0].Reason, "offers fit") {
		t.Fatalf("nothing fits: %+v", reps)
	}
	if !f.notified(f.buyer.ID, "No replacement could be booked") {
		t.Error("buyer not told")
	}
	if got, _ := f.db.FindReservation(f.ctx, r.ID); len(got.Pieces) != 1 || !got.Pieces[0].End.Equal(start.Add(10*time.Hour)) {
		t.Fatalf("rental moved: %+v", got.Pieces)
	}
}

// secondReplica is another replica on the database dsn names (its own
// handle and service, replica "second", its clock at `at`), its local
// processor seen through wrap (nil: as it is).
func (f *fixture) secondReplica(dsn string, wrap func(billing.Processor) billing.Processor, at time.Time) *Service {
	f.t.Helper()
	db2, err := store.Open(f.ctx, dsn)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { db2.Close() })
	var proc billing.Processor = billing.NewLocal(billing.LocalConfig{Store: db2})
	if wrap != nil {
		proc = wrap(proc)
	}
	wf2, err := New(f.ctx, Config{Billing: proc, PlatformFeeBP: feeBP, Replica: "second", Now: func() time.Time { return at }},
		db2, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		f.t.Fatal(err)
	}
	return wf2
}

// raceTicks races the replicas' background work at `at` without the
// lease (as after a lease takeover): once the first has measured the
// outage, their replacement steps start together from a gate, so both
// plan the same replacement and try to record it; then their whole
// background ticks run at once twice more, a second apart.
func (f *fixture) raceTicks(at time.Time, replicas ...*Service) {
	for _, wf := range replicas {
		wf.measureTick(f.ctx, at) // the first measures; the others' connections are warm
	}
	for round := range 3 {
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for _, wf := range replicas {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				if round == 0 {
					wf.replaceTick(f.ctx, at)
				} else {
					wf.Tick(f.ctx, at.Add(time.Duration(round)*time.Second))
				}
			}()
		}
		close(gate)
		wg.Wait()
	}
}

// TestTwoReplicasBookOneReplacement: two replicas on one database (two
// handles, two services), their background ticks run at the same moment
// without the lease, as after a lease takeover: exactly one replacement
// is booked. On PostgreSQL (GPUMARKET_TEST_DB=postgres) these are two
// connections pools to one server.
func TestTwoReplicasBookOneReplacement(t *testing.T) {
	start := t0.Add(time.Hour)
	dsn := pgtest.DSN(t, filepath.Join(t.TempDir(), "gpm.db"))
	f, _, _, r := replacementFixtureAt(t, dsn, market.ReplaceAuto, start)
	f.tick(start)
	f.failHost(start, start.Add(time.Hour))
	detect := start.Add(time.Hour + 5*time.Minute)
	f.now = detect
	f.raceTicks(detect, f.wf, f.secondReplica(dsn, nil, detect))
	reps := f.replacements(r.ID)
	got, err := f.db.FindReservation(f.ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 1 || reps[0].State != store.ReplacementBooked || len(got.Pieces) != 2 {
		t.Fatalf("replacements %+v, pieces %d", reps, len(got.Pieces))
	}
	if f.ledgerSum(r.ID, market.EntryRefund) != reps[0].Split.Refund || reps[0].Split.Refund <= 0 {
		t.Fatalf("refunded %s, want %s once", f.ledgerSum(r.ID, market.EntryRefund), reps[0].Split.Refund)
	}
}

// TestTwoReplicasChargeTheBuyersShareOnce: the buyer-share path under the
// same race. The replacement is dearer than the failing provider's SLA cap
// covers (the figures of replacepremium_test.go: 23,560¢ for 9,794¢ of
// remaining time; the provider bears its cap, 9,960¢, the buyer 3,806¢,
// within a maximum premium of 31¢ per reference device-hour), so the
// buyer's share is charged off-session to the saved card, through
// billing.Stripe against stripe-mock. Both replicas plan it at the same
// moment: exactly one charge reaches Stripe, under the charge intent's
// key, one payment is made and recorded once in the ledger, one
// replacement is booked with it, and the rental settles and reconciles.
func TestTwoReplicasChargeTheBuyersShareOnce(t *testing.T) {
	start := t0.Add(time.Hour)
	dsn := pgtest.DSN(t, filepath.Join(t.TempDir(), "gpm.db"))
	bank := newStripeBank(t)
	f, prov2, o2, r := replacementFixtureWith(t, dsn, func(l *billing.Local) billing.Processor { return bank.processor(l) },
		market.Replacement{Policy: market.ReplaceAuto, MaxPremium: 31}, 599, start)
	card := f.saveCard(f.buyer.ID, "4242 4242 4242 4242")
	f.tick(start)
	f.failHost(start, start.Add(5*time.Hour))
	detect := start.Add(5*time.Hour + 5*time.Minute)
	f.now = detect
	f.raceTicks(detect, f.wf, f.secondReplica(dsn, bank.processor, detect))

	reps := f.replacements(r.ID)
	want := market.ReplacementSplit{Remaining: premRemaining, Delivered: premDelivered, Cost: premCost, ProviderShare: premProviderShare, BuyerShare: premBuyerShare}
	if len(reps) != 1 || reps[0].State != store.ReplacementBooked || reps[0].Split != want || reps[0].PremiumRef == "" {
		t.Fatalf("replacements %+v, want one booked with %+v", reps, want)
	}
	got, err := f.db.FindReservation(f.ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Pieces) != 2 || got.Pieces[0].AmountCents != premOriginalAmount || got.Pieces[1].OfferID != o2.ID ||
		got.Pieces[1].AmountCents != premCost || !got.Pieces[1].Start.Equal(detect) || got.AmountCents != 19920+premBuyerShare {
		t.Fatalf("reservation %s, pieces %+v", got.AmountCents, got.Pieces)
	}
	ci, err := f.db.FindChargeIntent(f.ctx, reps[0].ChargeIntentID)
	if err != nil || ci.State != market.ChargeDone || ci.Purpose != market.PurposeReplacement || ci.Amount != premBuyerShare ||
		ci.ProcessorMethodID != card.ProcessorMethodID || ci.PaymentIntentID != reps[0].PremiumRef {
		t.Fatalf("charge intent %+v %v", ci, err)
	}
	// One request reached Stripe, under the intent's key; one payment.
	reqs, pays := bank.charges()
	if len(reqs) != 1 || reqs[ci.Key()] != 1 {
		t.Fatalf("charges sent to stripe-mock by key %v, want one under %q", reqs, ci.Key())
	}
	if len(pays) != 1 || pays[0].ID != reps[0].PremiumRef || pays[0].AmountReceived != premBuyerShare {
		t.Fatalf("payments %+v", pays)
	}
	// Recorded once: the share's charge entries carry that payment and sum
	// to the share; the rental's charges are what was paid and the share.
	es, err := f.db.ListLedger(f.ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	var share market.Cents
	for _, e := range es {
		if e.StripeRef == pays[0].ID {
			if e.Kind != market.EntryCharge {
				t.Errorf("entry %+v on the share's payment", e)
			}
			share += e.Amount
		}
	}
	if share != premBuyerShare || f.ledgerSum(r.ID, market.EntryCharge) != 19920+premBuyerShare {
		t.Fatalf("share recorded %s, charges %s; want %d and %d", share, f.ledgerSum(r.ID, market.EntryCharge), premBuyerShare, 19920+premBuyerShare)
	}
	if p := f.ledgerSum(r.ID, market.EntryReplacement); p != premCost-premBuyerShare {
		t.Errorf("passed to the new provider %s, want %d", p, premCost-premBuyerShare)
	}
	f.settleReplaced(prov2, r.ID, start.Add(10*time.Hour))
	if reqs, pays := bank.charges(); len(reqs) != 1 || len(pays) != 1 {
		t.Fatalf("after settling: requests %v, payments %d", reqs, len(pays))
	}
}

// TestAdminTriggerIsAuditedInTheDecisionsTransaction: the admin's id goes
// with the decision into the store's transaction: a booking that fails
// inside it (the rental moved on) leaves neither the replacement nor its
// audit entry; the one that commits leaves both, once, with the admin on
// each; a trigger without an admin is refused; and it settles and
// reconciles.
func TestAdminTriggerIsAuditedInTheDecisionsTransaction(t *testing.T) {
	start := t0.Add(time.Hour)
	f, prov2, o2, r := replacementFixture(t, market.ReplaceAuto, start)
	now := start.Add(3 * time.Hour)
	f.tick(now)
	f.now = now
	inc, err := f.db.ReportIncident(f.ctx, store.Incident{Incident: market.Incident{PieceID: r.Pieces[0].ID, Kind: market.IncidentHostFailure,
		Start: now.Add(-10 * time.Minute), End: now, DevicesAffected: 8, Note: "no answer on ssh"},
		ReservationID: r.ID, ReportedBy: store.ReportedByProvider, ReporterID: f.prov.ID}, now)
	if err != nil {
		t.Fatal(err)
	}
	audited := func() []store.AuditEntry {
		t.Helper()
		es, _, err := f.db.ListAudit(f.ctx, store.AuditFilter{Action: store.AuditReplacementTrigger})
		if err != nil {
			t.Fatal(err)
		}
		return es
	}
	if _, err := f.wf.TriggerReplacement(f.ctx, 0, r.ID, inc.ID, 0); market.ErrorCode(err) != market.CodeForbidden {
		t.Fatalf("trigger without an admin: %v", err)
	}
	// A booking the store refuses inside its transaction: the piece is no
	// longer the one planned (its end differs), so nothing commits.
	p := market.ReservationPiece{OfferID: o2.ID, ProviderID: o2.ProviderID, Devices: 8, Start: now, End: r.Pieces[0].End, PriceCents: 199, AmountCents: 9552, Gang: true}
	rep := store.Replacement{IncidentID: inc.ID, TriggeredBy: f.admin.ID, ReservationID: r.ID, PieceID: r.Pieces[0].ID, Kind: inc.Kind,
		Policy: market.ReplaceAuto, From: now, Until: r.Pieces[0].End.Add(-time.Hour)}
	if _, _, err := f.db.BookReplacement(f.ctx, rep, 0, []market.ReservationPiece{p}, market.ReplacementSplit{Cost: 9552}, market.TierAnyone, now); market.ErrorCode(err) != market.CodeConflict {
		t.Fatalf("booking a moved rental: %v", err)
	}
	if reps, es := f.replacements(r.ID), audited(); len(reps) != 0 || len(es) != 0 {
		t.Fatalf("a refused booking left %+v and %+v", reps, es)
	}
	got, err := f.wf.TriggerReplacement(f.ctx, f.admin.ID, r.ID, inc.ID, 0)
	if err != nil || got.State != store.ReplacementBooked || got.TriggeredBy != f.admin.ID {
		t.Fatalf("trigger: %+v %v", got, err)
	}
	if _, err := f.wf.TriggerReplacement(f.ctx, f.admin.ID, r.ID, inc.ID, 0); market.ErrorCode(err) != market.CodeConflict {
		t.Fatalf("second trigger: %v", err)
	}
	es := audited()
	if len(es) != 1 || es[0].ActorID != f.admin.ID || es[0].SubjectID != r.ID || es[0].SubjectKind != store.AuditSubjectReservation ||
		!strings.Contains(es[0].Note, "triggered from incident") || !strings.HasSuffix(es[0].Note, ": booked.") {
		t.Fatalf("audit entries %+v", es)
	}
	if reps := f.replacements(r.ID); len(reps) != 1 || reps[0].ID != got.ID || reps[0].TriggeredBy != f.admin.ID {
		t.Fatalf("replacements %+v", reps)
	}
	f.settleReplaced(prov2, r.ID, r.Pieces[0].End)
}

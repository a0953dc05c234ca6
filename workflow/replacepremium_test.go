package workflow

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/store/pgtest"
)

// The figures of a dearer replacement, derived from the terms by hand.
// The fixture's rental: 8 H100 for 10 h at 249¢ = 19,920¢, credit cap
// 50 %. Its host falls silent after 5 h and is found at 5 h 5 min: 4 h
// 55 min = 17,700 s remain, so Remaining = 19,920 × 17,700 / 36,000 =
// 9,794¢ and Delivered = 10,126¢. The other provider's offer is 599¢,
// matched for 5 whole hours, 8 × 5 × 599 = 23,960¢, booked for 17,700 s:
// 23,960 × 17,700 / 18,000 = 23,560¢. It is dearer by 23,560 − 9,794 =
// 13,766¢; the failing provider bears its cap, 19,920 × 50 % = 9,960¢
// (less than the 10,126¢ it delivered), and the buyer the rest, 3,806¢.
// The buyer's share is allowed per reference device-hour (A100 = 1): an
// H100 is 989 / 312 = 3.170 of one, so the replacement delivers 8 ×
// 17,700 × 3,170 / 3,600 = 124,686 thousandths; at 31¢ that allows
// 3,865¢ ≥ 3,806¢, at 30¢ only 3,740¢.
const (
	premRemaining, premDelivered, premCost = 9794, 10126, 23560
	premProviderShare, premBuyerShare      = 9960, 3806
	premOriginalAmount                     = premDelivered - premProviderShare // 166
)

// premiumFixture books the fixture's rental with auto replacement and
// maxPremium, the other provider at 599¢, through wrap's processor; the
// buyer saves card (none when empty); the host fails at 5 h and the tick
// at 5 h 5 min runs. It returns the second provider and offer, the reservation, the
// detection time and the rental's end.
func premiumFixture(t *testing.T, wrap func(*billing.Local) billing.Processor, maxPremium market.Cents, card string) (*fixture, market.User, market.Offer, market.Reservation, time.Time, time.Time) {
	start := t0.Add(time.Hour)
	f, prov2, o2, r := replacementFixtureWith(t, pgtest.DSN(t, filepath.Join(t.TempDir(), "gpm.db")), wrap,
		market.Replacement{Policy: market.ReplaceAuto, MaxPremium: maxPremium}, 599, start)
	if card != "" {
		f.saveCard(f.buyer.ID, card)
	}
	f.tick(start)
	f.failHost(start, start.Add(5*time.Hour))
	detect := start.Add(5*time.Hour + 5*time.Minute)
	f.tick(detect)
	return f, prov2, o2, r, detect, start.Add(10 * time.Hour)
}

// settleReplaced onboards both providers, runs the ticks past end until
// the rental is settled, and reconciles.
func (f *fixture) settleReplaced(prov2 market.User, resID int64, end time.Time) {
	f.t.Helper()
	f.onboard()
	a, err := f.proc.CreateConnectedAccount(f.ctx, prov2.Email, "provider_2_account")
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.db.CreatePayoutAccount(f.ctx, prov2.ID, a.ID, f.now); err != nil {
		f.t.Fatal(err)
	}
	ev, err := f.local.CompleteOnboarding(a.ID, f.now)
	f.apply([]billing.Event{ev}, err)
	for i := 1; i < 8; i++ {
		f.tick(end.Add(time.Duration(i) * time.Hour))
	}
	if st := f.settlement(resID); st.State != store.SettlementDone {
		f.t.Fatalf("settlement %+v", st)
	}
	f.requireReconciled()
}

// TestDearerReplacementChargesTheBuyersShare: the failing provider bears
// up to its cap, the buyer's saved card is charged the rest off-session
// within their maximum premium, the replacement is booked with the
// payment, every movement is in the ledger, and the rental settles and
// reconciles (buyer paid = delivered + replacement + refunds).
func TestDearerReplacementChargesTheBuyersShare(t *testing.T) {
	f, prov2, _, r, detect, end := premiumFixture(t, nil, 31, "4242 4242 4242 4242")
	reps := f.replacements(r.ID)
	if len(reps) != 1 || reps[0].State != store.ReplacementBooked || reps[0].ChargeIntentID == 0 || reps[0].PremiumRef == "" {
		t.Fatalf("replacements %+v", reps)
	}
	want := market.ReplacementSplit{Remaining: premRemaining, Delivered: premDelivered, Cost: premCost, ProviderShare: premProviderShare, BuyerShare: premBuyerShare}
	if reps[0].Split != want {
		t.Fatalf("split %+v, want %+v", reps[0].Split, want)
	}
	got, err := f.db.FindReservation(f.ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Pieces) != 2 || !got.Pieces[0].End.Equal(detect) || got.Pieces[0].AmountCents != premOriginalAmount ||
		got.Pieces[1].ProviderID != prov2.ID || got.Pieces[1].AmountCents != premCost || !got.Pieces[1].Start.Equal(detect) {
		t.Fatalf("pieces %+v", got.Pieces)
	}
	if got.AmountCents != 19920+premBuyerShare {
		t.Errorf("reservation amount %s, want %d", got.AmountCents, 19920+premBuyerShare)
	}
	// Charged: the rental, 19,920¢, and the share, 3,806¢, once, on its own payment.
	if c := f.ledgerSum(r.ID, market.EntryCharge); c != 19920+premBuyerShare {
		t.Errorf("charged %s, want %d", c, 19920+premBuyerShare)
	}
	if p := f.ledgerSum(r.ID, market.EntryReplacement); p != premCost-premBuyerShare {
		t.Errorf("passed to the new provider %s, want %d", p, premCost-premBuyerShare)
	}
	var shares []billing.Payment
	for _, p := range f.processorPayments() {
		if p.ID == reps[0].PremiumRef {
			shares = append(shares, p)
		}
	}
	if len(shares) != 1 || shares[0].AmountReceived != premBuyerShare {
		t.Fatalf("share payments %+v", shares)
	}
	ci, err := f.db.FindChargeIntent(f.ctx, reps[0].ChargeIntentID)
	if err != nil || ci.State != market.ChargeDone || ci.Purpose != market.PurposeReplacement || ci.Amount != premBuyerShare {
		t.Fatalf("charge intent %+v %v", ci, err)
	}
	if !f.notified(f.buyer.ID, "$38.06 was charged to your saved card") {
		t.Error("buyer not told of the charge")
	}
	f.tick(detect.Add(time.Minute))
	if reps := f.replacements(r.ID); len(reps) != 1 || f.ledgerSum(r.ID, market.EntryCharge) != 19920+premBuyerShare {
		t.Fatalf("after another tick: %+v", reps)
	}
	f.settleReplaced(prov2, r.ID, end)
}

// TestDearerReplacementBeyondTheMaximumPremium: 1¢ less per reference
// device-hour and the buyer's share is not allowed: nothing is booked or
// charged, and the buyer is told why.
func TestDearerReplacementBeyondTheMaximumPremium(t *testing.T) {
	f, prov2, _, r, _, end := premiumFixture(t, nil, 30, "4242 4242 4242 4242")
	reps := f.replacements(r.ID)
	if len(reps) != 1 || reps[0].State != store.ReplacementUnfilled || !strings.Contains(reps[0].Reason, "your maximum premium allows $37.40") {
		t.Fatalf("replacements %+v", reps)
	}
	if got, _ := f.db.FindReservation(f.ctx, r.ID); len(got.Pieces) != 1 {
		t.Fatalf("booked: %+v", got.Pieces)
	}
	if len(f.processorPayments()) != 1 || !f.notified(f.buyer.ID, "No replacement could be booked") {
		t.Fatal("charged, or the buyer not told")
	}
	f.settleReplaced(prov2, r.ID, end)
}

// TestDearerReplacementWithoutACardOrDeclined: no saved card, or one the
// bank declines: no replacement is booked, nothing is charged, the buyer
// is told, and it reconciles.
func TestDearerReplacementWithoutACardOrDeclined(t *testing.T) {
	for _, card := range []string{"", "4000 0000 0000 0002"} {
		f, prov2, _, r, detect, end := premiumFixture(t, nil, 31, card)
		reps := f.replacements(r.ID)
		if len(reps) != 1 || reps[0].State != store.ReplacementUnfilled {
			t.Fatalf("card %q: replacements %+v", card, reps)
		}
		told := "no saved card"
		if card != "" {
			told = "your saved card was not charged"
		}
		if !f.notified(f.buyer.ID, told) {
			t.Errorf("card %q: buyer not told %q (reason %q)", card, told, reps[0].Reason)
		}
		f.tick(detect.Add(market.ChargeRetryGrace + time.Second))
		if got, _ := f.db.FindReservation(f.ctx, r.ID); len(got.Pieces) != 1 || len(f.processorPayments()) != 1 {
			t.Fatalf("card %q: booked or charged: %+v", card, got.Pieces)
		}
		f.settleReplaced(prov2, r.ID, end)
	}
}

// TestDearerReplacementChargedBeforeACrash: the share's charge goes
// through but the answer is lost (the process dies there); after the
// restart the retrier repeats the call under the same key, gets the same
// payment, and books the replacement once.
func TestDearerReplacementChargedBeforeACrash(t *testing.T) {
	var cp *crashingProcessor
	f, prov2, _, r, detect, end := premiumFixture(t, func(l *billing.Local) billing.Processor {
		cp = &crashingProcessor{Processor: l, crashes: 1}
		return cp
	}, 31, "4242 4242 4242 4242")
	reps := f.replacements(r.ID)
	if len(reps) != 1 || reps[0].State != store.ReplacementCharging || len(cp.made) != 1 {
		t.Fatalf("after the lost answer: %+v, payments %v", reps, cp.made)
	}
	if got, _ := f.db.FindReservation(f.ctx, r.ID); len(got.Pieces) != 1 {
		t.Fatalf("booked before the charge was recorded: %+v", got.Pieces)
	}
	f.restart()
	f.tick(detect.Add(market.ChargeRetryGrace + time.Second))
	reps = f.replacements(r.ID)
	if len(reps) != 1 || reps[0].State != store.ReplacementBooked || reps[0].PremiumRef != cp.made[0] {
		t.Fatalf("after the restart: %+v (payment %v)", reps, cp.made)
	}
	if len(f.processorPayments()) != 2 || f.ledgerSum(r.ID, market.EntryCharge) != 19920+premBuyerShare {
		t.Fatalf("payments %+v, charged %s", f.processorPayments(), f.ledgerSum(r.ID, market.EntryCharge))
	}
	if got, _ := f.db.FindReservation(f.ctx, r.ID); len(got.Pieces) != 2 || !got.Pieces[1].Start.Equal(detect) {
		t.Fatalf("pieces %+v", got.Pieces)
	}
	f.settleReplaced(prov2, r.ID, end)
}

// TestDearerReplacementPaidButGoneIsRefunded: the share is paid (its
// answer lost) and the capacity is taken before the retrier books it: the
// replacement is unfilled, the share is in the ledger as the buyer's and
// refunded in full, and it reconciles.
func TestDearerReplacementPaidButGoneIsRefunded(t *testing.T) {
	var cp *crashingProcessor
	f, prov2, o2, r, detect, end := premiumFixture(t, func(l *billing.Local) billing.Processor {
		cp = &crashingProcessor{Processor: l, crashes: 1}
		return cp
	}, 31, "4242 4242 4242 4242")
	f.restart()
	// Someone else books the other provider's offer meanwhile.
	other := f.user("other@example.com")
	f.now = detect.Add(10 * time.Second)
	p := market.ReservationPiece{OfferID: o2.ID, Devices: 8, Start: detect.Add(10 * time.Second), End: end, PriceCents: 599, AmountCents: 23000, Gang: true}
	if _, err := f.wf.Book(f.ctx, other.ID, []market.ReservationPiece{p}, `{"version":1}`, 30*time.Minute); err != nil {
		t.Fatal(err)
	}
	f.tick(detect.Add(market.ChargeRetryGrace + time.Second))
	reps := f.replacements(r.ID)
	if len(reps) != 1 || reps[0].State != store.ReplacementUnfilled || reps[0].PremiumRef != cp.made[0] || !reps[0].RefundDone ||
		reps[0].Split.Refund != premBuyerShare {
		t.Fatalf("replacements %+v", reps)
	}
	if c, rf := f.ledgerSum(r.ID, market.EntryCharge), f.ledgerSum(r.ID, market.EntryRefund); c != 19920+premBuyerShare || rf != premBuyerShare {
		t.Fatalf("charged %s refunded %s", c, rf)
	}
	if !f.notified(f.buyer.ID, "$38.06 charged for it is refunded") {
		t.Error("buyer not told")
	}
	f.settleReplaced(prov2, r.ID, end)
}

package store

import (
	"context"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

const meteredFeeBP = 1000 // 10 %

// meteredOffer is a listed one-node offer of 8 devices at 249¢ per
// device-hour that allows metered rentals with notice minutes.
func meteredOffer(t *testing.T, db *DB, providerID int64, notice int) market.Offer {
	t.Helper()
	ctx := context.Background()
	o, err := db.CreateOffer(ctx, validOffer(providerID), t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.ReviewOffer(ctx, o.ID, market.ReviewApproved, "", t0); err != nil {
		t.Fatal(err)
	}
	if err := db.SetOfferMetered(ctx, providerID, o.ID, true, notice, t0); err != nil {
		t.Fatal(err)
	}
	return o
}

// topUp pays amount into the buyer's balance as the processor's payment pi.
func topUp(t *testing.T, db *DB, buyerID int64, amount market.Cents, pi string) TopUp {
	t.Helper()
	ctx := context.Background()
	tu, err := db.CreateTopUp(ctx, buyerID, amount, TopUpSaved, t0)
	if err != nil {
		t.Fatal(err)
	}
	if tu, err = db.RecordTopUpPaid(ctx, tu.ID, pi, t0); err != nil {
		t.Fatal(err)
	}
	return tu
}

// usable reports the rental's node usable as its agent does: access
// handed over at installed, the acceptance test passed at accepted.
func usable(t *testing.T, db *DB, tokenID, pieceID int64, installed, accepted time.Time) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.RecordInstalled(ctx, tokenID, pieceID, market.Connection{Host: "203.0.113.7", Port: 22, User: "gpu"}, installed); err != nil {
		t.Fatal(err)
	}
	res := market.AcceptanceResult{Metric: market.FigureBF16TFLOPS, PerDeviceMilli: []int64{900000, 900000}, DurationSeconds: 30}
	if _, err := db.RecordAcceptance(ctx, tokenID, pieceID, res, accepted); err != nil {
		t.Fatal(err)
	}
}

func meter(t *testing.T, db *DB, id int64, at time.Time) MeterStep {
	t.Helper()
	st, err := db.MeterRental(context.Background(), id, meteredFeeBP, at)
	if err != nil {
		t.Fatalf("MeterRental at %s: %v", at, err)
	}
	return st
}

// The whole life of a rental with figures by hand: 2 devices at 249¢ =
// 498¢ an hour. Started at s; usable at s+4m (access at s+3m, acceptance
// at s+4m); a host failure s+12m..s+15m; stopped by the buyer at s+25m.
// Billable: 21 minutes less 3 = 18; 18 × 498 / 60 = 149.4 → 149¢. Fee 10 %
// 14.9 → 15¢, payout 134¢.
func TestMeteredRentalDrawsItsUsableMinutes(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	other := createUser(t, db, "other@example.com", false)
	o := meteredOffer(t, db, prov.ID, 30)
	s := t0.Add(time.Hour)
	m := func(n int) time.Time { return s.Add(time.Duration(n) * time.Minute) }

	// No balance: it cannot start (10 minutes at 17¢ = 170¢ needed).
	_, err := db.StartMeteredRental(ctx, buyer.ID, o.ID, 2, 0, s)
	wantCode(t, err, market.CodeConflict)
	tu := topUp(t, db, buyer.ID, 2000, "pi_topup_1")

	// An offer that does not allow it refuses.
	plain, err := db.CreateOffer(ctx, validOffer(prov.ID), t0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.StartMeteredRental(ctx, buyer.ID, plain.ID, 2, 0, s)
	wantCode(t, err, market.CodeNotFound)

	rental, err := db.StartMeteredRental(ctx, buyer.ID, o.ID, 2, 0, s)
	if err != nil {
		t.Fatal(err)
	}
	if !rental.PieceEnd.Equal(m(30)) || rental.Price != 249 || rental.Devices != 2 || !rental.Running() {
		t.Fatalf("started %+v, want a running rental of 2 at 249¢ holding to s+30m", rental)
	}
	r, err := db.FindReservation(ctx, rental.ReservationID)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != market.ReservationActive || r.AmountCents != 0 {
		t.Fatalf("reservation %s for %s, want active for nothing up front", r.State, r.AmountCents)
	}
	// Its devices are busy: 8 devices overlapping its held time do not
	// fit; 6 do; 8 after it do.
	book := func(devices int, from, to time.Time) error {
		_, err := db.CreateReservation(ctx, other.ID, []market.ReservationPiece{{OfferID: o.ID, Devices: devices, Start: from, End: to,
			PriceCents: 249, AmountCents: market.Cents(249 * devices)}}, `{"version":1}`, s, 30*time.Minute)
		return err
	}
	wantCode(t, book(8, m(20), m(80)), market.CodeConflict)
	if err := book(6, m(20), m(80)); err != nil {
		t.Fatalf("6 free devices beside the rental: %v", err)
	}

	tok, _ := hostToken(t, db, prov.ID, o.ID, 0)
	// Before the machine is usable nothing is drawn.
	if st := meter(t, db, rental.ReservationID, m(3)); st.DrewMinutes != 0 || st.ClockStarted {
		t.Fatalf("drew %d minutes before the machine was usable", st.DrewMinutes)
	}
	usable(t, db, tok.ID, rental.PieceID, m(3), m(4))
	// At s+10m, drawn to s+8m (2 minutes' lag): 4 minutes, 4 × 498 / 60 =
	// 33.2 → 33¢; capacity held again to s+40m.
	st := meter(t, db, rental.ReservationID, m(10))
	if !st.ClockStarted || !st.Rental.ClockStart.Equal(m(4)) || st.DrewMinutes != 4 || st.DrewCents != 33 || !st.Extended || !st.Rental.PieceEnd.Equal(m(40)) {
		t.Fatalf("at s+10m: %+v", st)
	}
	if _, err := db.writer.ExecContext(ctx, `INSERT INTO measured_outages (piece_id, node, kind, start_at, end_at, devices, created_at)
		VALUES (?, 0, ?, ?, ?, 2, ?)`, rental.PieceID, string(market.IncidentHostFailure), unix(m(12)), unix(m(15)), unix(m(16))); err != nil {
		t.Fatal(err)
	}
	// At s+20m, to s+18m: 14 minutes less the 3 of the failure = 11;
	// 11 × 498 / 60 = 91.3 → 91¢, so this draw is 7 minutes for 58¢.
	if st := meter(t, db, rental.ReservationID, m(20)); st.DrewMinutes != 7 || st.DrewCents != 58 {
		t.Fatalf("at s+20m: drew %d min %d¢, want 7 for 58", st.DrewMinutes, st.DrewCents)
	}
	// The same round again draws nothing.
	if st := meter(t, db, rental.ReservationID, m(20)); st.DrewMinutes != 0 || st.DrewCents != 0 {
		t.Fatalf("a repeated round drew %d min %d¢", st.DrewMinutes, st.DrewCents)
	}
	// Another buyer cannot stop it.
	_, err = db.StopMeteredRental(ctx, other.ID, rental.ReservationID, m(25))
	wantCode(t, err, market.CodeNotFound)
	stopped, err := db.StopMeteredRental(ctx, buyer.ID, rental.ReservationID, m(25))
	if err != nil {
		t.Fatal(err)
	}
	if !stopped.StopAt.Equal(m(25)) || stopped.StopReason != market.MeteredStopBuyer || !stopped.PieceEnd.Equal(m(25)) {
		t.Fatalf("stopped %+v", stopped)
	}
	_, err = db.StopMeteredRental(ctx, buyer.ID, rental.ReservationID, m(26))
	wantCode(t, err, market.CodeConflict)
	// Freed from the stop: beside the 6 booked from s+20m, 2 more fit from s+25m.
	if err := book(2, m(25), m(85)); err != nil {
		t.Fatalf("the stopped rental's devices are not free: %v", err)
	}
	// At s+26m not final yet (the stop is under 2 minutes old).
	if st := meter(t, db, rental.ReservationID, m(26)); st.Rental.Final {
		t.Fatal("final before the lag passed")
	}
	st = meter(t, db, rental.ReservationID, m(28))
	if !st.Rental.Final || st.Rental.DrawnMinutes != 18 || st.Rental.DrawnCents != 149 || st.Rental.Fee != 15 || st.Rental.Payout != 134 || !st.PayoutDue {
		t.Fatalf("final %+v, want 18 minutes, 149¢, fee 15¢, payout 134¢", st.Rental)
	}
	due, err := db.ListDueMeteredPayouts(ctx)
	if err != nil || len(due) != 1 || due[0].ReservationID != rental.ReservationID {
		t.Fatalf("due payouts %+v, %v", due, err)
	}
	if err := db.RecordMeteredTransfer(ctx, rental.ReservationID, "tr_1", m(29)); err != nil {
		t.Fatal(err)
	}
	if err := db.RecordMeteredTransfer(ctx, rental.ReservationID, "tr_1", m(29)); err != nil {
		t.Fatal(err)
	}
	bal, err := db.FindBalance(ctx, buyer.ID)
	if err != nil {
		t.Fatal(err)
	}
	if bal.TopUps != 2000 || bal.Draws != 149 || bal.Refunds != 0 || bal.Balance != 1851 {
		t.Fatalf("balance %+v, want 2000 − 149 = 1851", bal)
	}
	// Refund of the unused balance to the top-up's payment.
	parts, err := db.RequestBalanceRefund(ctx, buyer.ID, 0, m(30))
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 1 || parts[0].TopUpID != tu.ID || parts[0].Amount != 1851 || parts[0].PaymentIntentID != "pi_topup_1" {
		t.Fatalf("refund parts %+v", parts)
	}
	// Asked again while the first is not made: nothing left to ask.
	_, err = db.RequestBalanceRefund(ctx, buyer.ID, 0, m(30))
	wantCode(t, err, market.CodeConflict)
	if err := db.RecordBalanceRefund(ctx, parts[0].RefundID, parts[0].TopUpID, "re_1", m(31)); err != nil {
		t.Fatal(err)
	}
	es, err := db.ListBalanceEntries(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := market.CheckBalanceLedger(es); err != nil {
		t.Fatal(err)
	}
	b := map[string]market.Cents{}
	for _, e := range es {
		b[e.Debit] += e.Amount
		b[e.Credit] -= e.Amount
	}
	// Everything owed is settled: the buyer's balance and the provider at
	// zero, the platform kept the fee.
	if b[market.BalanceAccount(buyer.ID)] != 0 || b[market.ProviderAccount(prov.ID)] != 0 || b[market.AccountPlatformFees] != -15 || b[market.AccountPlatformCash] != 15 {
		t.Fatalf("accounts %v", b)
	}
	bal, _ = db.FindBalance(ctx, buyer.ID)
	if bal.Balance != 0 || bal.Refunds != 1851 {
		t.Fatalf("after the refund %+v", bal)
	}
	// The balance ledger is append-only.
	if _, err := db.writer.ExecContext(ctx, `UPDATE balance_entries SET amount_cents = 1`); err == nil {
		t.Fatal("a balance entry was changed")
	}
}

// 8 devices at 249¢ = 1,992¢ an hour, 33.2¢ a minute (34¢ rounded up).
// 500¢ covers the start (10 × 34 = 340¢); the buyer is warned at once
// (under (15 + 2) × 34 = 578¢) and the rental stops once the balance is
// under (2 + 2) × 34 = 136¢: at 11 minutes drawn, floor(11 × 33.2) = 365¢,
// 135¢ left, seen at c+13m. Final at c+15m: 13 minutes, floor(431.6) =
// 431¢, 69¢ left, never below zero.
func TestMeteredRentalStopsWhenTheBalanceRunsOut(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	o := meteredOffer(t, db, prov.ID, 0)
	topUp(t, db, buyer.ID, 500, "pi_small")
	s := t0.Add(time.Hour)
	rental, err := db.StartMeteredRental(ctx, buyer.ID, o.ID, 8, 0, s)
	if err != nil {
		t.Fatal(err)
	}
	if !rental.PieceEnd.Equal(s.Add(market.MeteredDefaultNoticeMinutes * time.Minute)) {
		t.Fatalf("held to %s, want the default notice ahead", rental.PieceEnd)
	}
	tok, _ := hostToken(t, db, prov.ID, o.ID, 0)
	c := s.Add(time.Minute)
	usable(t, db, tok.ID, rental.PieceID, c, c)
	var stoppedAt time.Time
	warned := 0
	for i := 2; i <= 20; i++ {
		st := meter(t, db, rental.ReservationID, c.Add(time.Duration(i)*time.Minute))
		if st.Warned {
			warned++
		}
		if st.Stopped {
			stoppedAt = st.Rental.StopAt
		}
	}
	if warned != 1 {
		t.Errorf("warned %d times, want once", warned)
	}
	if !stoppedAt.Equal(c.Add(13 * time.Minute)) {
		t.Fatalf("stopped at %s, want c+13m", stoppedAt)
	}
	got, err := db.FindMeteredRental(ctx, rental.ReservationID)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Final || got.DrawnMinutes != 13 || got.DrawnCents != 431 || got.StopReason != market.MeteredStopBalance {
		t.Fatalf("rental %+v, want final at 13 minutes for 431¢", got)
	}
	bal, _ := db.FindBalance(ctx, buyer.ID)
	if bal.Balance != 69 {
		t.Fatalf("balance %s, want 69¢", bal.Balance)
	}
	// The agent is told to remove access: the piece ended at the stop.
	as, err := db.ListAssignments(ctx, tok.ID, c.Add(14*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 1 || as[0].State != market.AccessRemove {
		t.Fatalf("assignments after the stop %+v, want one removal", as)
	}
	// The stop notice and the warning are the buyer's notifications.
	ns, err := db.ListNotifications(ctx, buyer.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	kinds := 0
	for _, n := range ns {
		if n.Kind == NotifyMeteredRental {
			kinds++
		}
	}
	if kinds != 2 {
		t.Fatalf("%d metered notifications, want the warning and the stop", kinds)
	}
}

// A forward booking ahead of a running rental on the same devices: the
// rental's capacity is not held over it, and it stops at the end it held.
func TestMeteredRentalStopsBeforeAForwardBooking(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	other := createUser(t, db, "other@example.com", false)
	o := meteredOffer(t, db, prov.ID, 30)
	topUp(t, db, buyer.ID, 100000, "pi_big")
	s := t0.Add(time.Hour)
	// A booking of all 8 devices from s+35m: a rental cannot start where it
	// could not run its 30 minutes' notice (from s+20m), but can at s.
	if _, err := db.CreateReservation(ctx, other.ID, []market.ReservationPiece{{OfferID: o.ID, Devices: 8, Start: s.Add(35 * time.Minute),
		End: s.Add(3 * time.Hour), PriceCents: 249, AmountCents: 8 * 249 * 3}}, `{"version":1}`, s, 30*time.Minute); err != nil {
		t.Fatal(err)
	}
	_, err := db.StartMeteredRental(ctx, buyer.ID, o.ID, 1, 0, s.Add(20*time.Minute))
	wantCode(t, err, market.CodeConflict)
	rental, err := db.StartMeteredRental(ctx, buyer.ID, o.ID, 1, 0, s)
	if err != nil {
		t.Fatal(err)
	}
	st := meter(t, db, rental.ReservationID, s.Add(10*time.Minute))
	if st.Extended || !st.NoticeStopAt.Equal(s.Add(30*time.Minute)) {
		t.Fatalf("at s+10m: %+v, want not extended, stopping at s+30m", st)
	}
	st = meter(t, db, rental.ReservationID, s.Add(30*time.Minute))
	if !st.Stopped || st.Rental.StopReason != market.MeteredStopNotice || !st.Rental.StopAt.Equal(s.Add(30*time.Minute)) {
		t.Fatalf("at s+30m: %+v, want stopped at the notice", st.Rental)
	}
}

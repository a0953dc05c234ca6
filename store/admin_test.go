package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

func TestAuditTrailIsAppendOnly(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	admin := createUser(t, db, "admin@example.com", false)
	if err := db.RecordAudit(ctx, AuditEntry{At: t0, ActorID: admin.ID, Action: "money.refund", SubjectKind: AuditSubjectReservation,
		SubjectID: 7, Before: `{"refunded":0}`, After: `{"refunded":500}`}); err != nil {
		t.Fatal(err)
	}
	if err := db.RecordAudit(ctx, AuditEntry{At: t0.Add(time.Hour), Action: AuditOfferAutoApprove, SubjectKind: AuditSubjectOffer, SubjectID: 3}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, db.RecordAudit(ctx, AuditEntry{At: t0}), market.CodeInvalid)

	refused := []string{`UPDATE audit_log SET note = 'edited'`, `DELETE FROM audit_log`, `UPDATE audit_log SET actor_id = NULL WHERE id = 1`}
	if db.Postgres() {
		refused = append(refused, `TRUNCATE audit_log`, `TRUNCATE ledger_entries`)
	}
	for _, stmt := range refused {
		_, err := db.writer.ExecContext(ctx, stmt)
		if err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: err = %v, want the append-only trigger to refuse it", stmt, err)
		}
	}

	all, total, err := db.ListAudit(ctx, AuditFilter{})
	if err != nil || total != 2 || len(all) != 2 {
		t.Fatalf("ListAudit = %d entries (total %d), %v; want 2", len(all), total, err)
	}
	if all[0].Action != AuditOfferAutoApprove || all[0].ActorID != 0 || all[1].ActorName != admin.DisplayName || all[1].After != `{"refunded":500}` {
		t.Errorf("entries newest first with actor names: %+v", all)
	}
	tests := []struct {
		name string
		f    AuditFilter
		want int
	}{
		{"by action prefix", AuditFilter{Action: AuditMoneyPrefix}, 1},
		{"by exact action", AuditFilter{Action: AuditOfferAutoApprove}, 1},
		{"by actor", AuditFilter{ActorID: admin.ID}, 1},
		{"by subject", AuditFilter{SubjectKind: AuditSubjectOffer, SubjectID: 3}, 1},
		{"by subject, no match", AuditFilter{SubjectKind: AuditSubjectOffer, SubjectID: 4}, 0},
		{"from, inclusive", AuditFilter{From: t0.Add(time.Hour)}, 1},
		{"to, exclusive", AuditFilter{To: t0.Add(time.Hour)}, 1},
		{"limit", AuditFilter{Limit: 1}, 1},
	}
	for _, tt := range tests {
		got, _, err := db.ListAudit(ctx, tt.f)
		if err != nil || len(got) != tt.want {
			t.Errorf("%s: %d entries, %v; want %d", tt.name, len(got), err, tt.want)
		}
	}
}

func TestNotifications(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	u := createUser(t, db, "u@example.com", false)
	other := createUser(t, db, "o@example.com", false)
	for i, msg := range []string{"first", "second"} {
		if err := db.Notify(ctx, Notification{UserID: u.ID, Kind: NotifyBookingMade, Message: msg, URL: "/x", CreatedAt: t0.Add(time.Duration(i) * time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	wantCode(t, db.Notify(ctx, Notification{UserID: u.ID}), market.CodeInvalid)
	if n, err := db.CountUnreadNotifications(ctx, u.ID); err != nil || n != 2 {
		t.Fatalf("unread = %d, %v; want 2", n, err)
	}
	if n, _ := db.CountUnreadNotifications(ctx, other.ID); n != 0 {
		t.Fatalf("another user's unread = %d, want 0", n)
	}
	ns, err := db.ListNotifications(ctx, u.ID, 0)
	if err != nil || len(ns) != 2 || ns[0].Message != "second" || !ns[0].ReadAt.IsZero() || ns[0].URL != "/x" {
		t.Fatalf("ListNotifications = %+v, %v", ns, err)
	}
	if err := db.MarkNotificationsRead(ctx, u.ID, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n, _ := db.CountUnreadNotifications(ctx, u.ID); n != 0 {
		t.Fatalf("unread after marking = %d", n)
	}
	ns, _ = db.ListNotifications(ctx, u.ID, 0)
	if !ns[0].ReadAt.Equal(t0.Add(time.Hour)) {
		t.Errorf("read at = %v", ns[0].ReadAt)
	}
}

func TestDecideOffer(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	admin := createUser(t, db, "admin@example.com", false)
	prov := createUser(t, db, "p@example.com", true)
	in := validOffer(prov.ID)
	o, err := db.CreateOffer(ctx, in, t0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.DecideOffer(ctx, admin.ID, o.ID, market.ReviewRejected, "  ", t0)
	wantCode(t, err, market.CodeInvalid)
	_, err = db.DecideOffer(ctx, admin.ID, o.ID, market.ReviewState("maybe"), "x", t0)
	wantCode(t, err, market.CodeInvalid)

	got, err := db.DecideOffer(ctx, admin.ID, o.ID, market.ReviewChangesRequested, "State the all-reduce method.", t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if got.Review != market.ReviewChangesRequested || got.ReviewNote != "State the all-reduce method." || got.Listed() {
		t.Fatalf("after asking for changes: %s %q listed=%v", got.Review, got.ReviewNote, got.Listed())
	}
	got, err = db.DecideOffer(ctx, admin.ID, o.ID, market.ReviewApproved, "", t0.Add(2*time.Minute))
	if err != nil || !got.Listed() || got.ReviewNote != "" {
		t.Fatalf("approve: %+v %v", got.Review, err)
	}
	entries, _, _ := db.ListAudit(ctx, AuditFilter{SubjectKind: AuditSubjectOffer, SubjectID: o.ID})
	if len(entries) != 2 || entries[0].Action != AuditOfferApprove || entries[1].Action != AuditOfferRequestChanges ||
		entries[0].Before != `{"review":"changes_requested","note":"State the all-reduce method."}` || entries[0].After != `{"review":"approved"}` ||
		entries[1].ActorID != admin.ID {
		t.Errorf("audit entries: %+v", entries)
	}
	ns, _ := db.ListNotifications(ctx, prov.ID, 0)
	if len(ns) != 2 || ns[0].Kind != NotifyListingApproved || ns[1].Kind != NotifyListingChanges || !strings.Contains(ns[1].Notice.Text(), "State the all-reduce method.") {
		t.Errorf("provider notifications: %+v", ns)
	}

	if err := db.SetOfferState(ctx, prov.ID, o.ID, market.OfferWithdrawn, t0); err != nil {
		t.Fatal(err)
	}
	_, err = db.DecideOffer(ctx, admin.ID, o.ID, market.ReviewApproved, "", t0)
	wantCode(t, err, market.CodeConflict)
	if ok, err := db.AutoApproveOffer(ctx, o.ID, t0); ok || err != nil {
		t.Errorf("auto-approving a withdrawn offer: %v, %v", ok, err)
	}
}

func TestAutoApproveAndVerifyFigure(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	admin := createUser(t, db, "admin@example.com", false)
	prov := createUser(t, db, "p@example.com", true)
	in := validOffer(prov.ID)
	o, err := db.CreateOffer(ctx, in, t0)
	if err != nil {
		t.Fatal(err)
	}
	ok, err := db.AutoApproveOffer(ctx, o.ID, t0)
	if err != nil || !ok {
		t.Fatalf("AutoApproveOffer = %v, %v", ok, err)
	}
	if ok, _ := db.AutoApproveOffer(ctx, o.ID, t0); ok {
		t.Error("an approved offer was approved again")
	}
	entries, _, _ := db.ListAudit(ctx, AuditFilter{Action: AuditOfferAutoApprove})
	if len(entries) != 1 || entries[0].ActorID != 0 {
		t.Errorf("auto-approval audit: %+v", entries)
	}

	if len(o.Figures) == 0 {
		t.Fatal("validOffer states no figure")
	}
	kind := o.Figures[0].Kind
	wantCode(t, db.VerifyFigure(ctx, admin.ID, o.ID, kind, " ", t0), market.CodeInvalid)
	wantCode(t, db.VerifyFigure(ctx, admin.ID, o.ID, market.FigureKind("nope"), "x", t0), market.CodeNotFound)
	if err := db.VerifyFigure(ctx, admin.ID, o.ID, kind, "Ran nccl-tests on the host, log #42", t0); err != nil {
		t.Fatal(err)
	}
	got, _ := db.FindProviderOffer(ctx, prov.ID, o.ID)
	if f, _ := got.Figure(kind); f.Basis != market.FigureVerified || f.VerifiedNote != "Ran nccl-tests on the host, log #42" {
		t.Errorf("figure after verifying: %+v", f)
	}
	entries, _, _ = db.ListAudit(ctx, AuditFilter{Action: AuditFigureVerify})
	if len(entries) != 1 || !strings.Contains(entries[0].After, `"basis":"verified"`) || entries[0].ActorID != admin.ID {
		t.Errorf("verification audit: %+v", entries)
	}
}

func TestSuspendAndReinstateProvider(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	admin := createUser(t, db, "admin@example.com", false)
	if err := db.SetUserAdmin(ctx, admin.ID, true); err != nil {
		t.Fatal(err)
	}
	prov := createUser(t, db, "p@example.com", true)
	buyer := createUser(t, db, "b@example.com", false)
	o := listedOffer(t, db, prov.ID, 8)
	now := o.AvailableFrom.Add(-time.Hour)
	r := book(t, db, buyer.ID, now, piece(o, 2, o.AvailableFrom, 4))
	if _, err := db.ConfirmReservation(ctx, r.ID, now); err != nil {
		t.Fatal(err)
	}
	sess, err := db.CreateSession(ctx, prov.ID, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_, raw, err := db.CreateAPIToken(ctx, prov.ID, "ci", TokenScopeWrite, now)
	if err != nil {
		t.Fatal(err)
	}

	_, err = db.SuspendProvider(ctx, admin.ID, prov.ID, "", now)
	wantCode(t, err, market.CodeInvalid)
	_, err = db.SuspendProvider(ctx, admin.ID, admin.ID, "no", now)
	wantCode(t, err, market.CodeConflict)
	s, err := db.SuspendProvider(ctx, admin.ID, prov.ID, "Listed hardware it does not have", now)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.OfferIDs) != 1 || s.OfferIDs[0] != o.ID || s.Flagged != 1 || s.RevokedTokens != 1 {
		t.Errorf("suspension = %+v, want the offer, one flagged reservation and one revoked token", s)
	}
	_, err = db.SuspendProvider(ctx, admin.ID, prov.ID, "again", now)
	wantCode(t, err, market.CodeConflict)

	// The session and the API token stop working at once.
	_, _, err = db.FindSession(ctx, sess.ID, now)
	wantCode(t, err, market.CodeNotFound)
	_, _, err = db.FindAPIToken(ctx, raw)
	wantCode(t, err, market.CodeUnauthorized)
	// The offer leaves the catalogue, the index source and the price market.
	if ls, total, err := db.FindOffers(ctx, OfferFilter{Now: now}); err != nil || total != 0 || len(ls) != 0 {
		t.Errorf("catalogue while suspended: %d offers (total %d), %v", len(ls), total, err)
	}
	if ls, _ := db.ListAllListedOffers(ctx, now); len(ls) != 0 {
		t.Errorf("index source while suspended: %d offers", len(ls))
	}
	if ps, _ := db.ListedPrices(ctx, "", now); len(ps) != 0 {
		t.Errorf("listed prices while suspended: %v", ps)
	}
	if l, err := db.FindOfferByID(ctx, o.ID); err != nil || !l.ProviderSuspended {
		t.Errorf("FindOfferByID: suspended = %v, %v", l.ProviderSuspended, err)
	}
	// No new bookings.
	_, err = db.CreateReservation(ctx, buyer.ID, []market.ReservationPiece{piece(o, 1, o.AvailableFrom.Add(8*time.Hour), 2)}, `{}`, now, hold)
	wantCode(t, err, market.CodeConflict)
	// The open reservation is flagged for review.
	flags, err := db.ListOpenReservationFlags(ctx)
	if err != nil || len(flags) != 1 || flags[0].ReservationID != r.ID || !strings.Contains(flags[0].Reason, "Listed hardware") {
		t.Fatalf("flags = %+v, %v", flags, err)
	}
	ps, _ := db.ListProviders(ctx, now)
	if len(ps) != 1 || !ps[0].User.Suspended || ps[0].SuspensionReason != "Listed hardware it does not have" || ps[0].Offers != 1 {
		t.Errorf("ListProviders = %+v", ps)
	}

	if _, err := db.ReinstateProvider(ctx, admin.ID, prov.ID, "Evidence received", now); err != nil {
		t.Fatal(err)
	}
	_, err = db.ReinstateProvider(ctx, admin.ID, prov.ID, "", now)
	wantCode(t, err, market.CodeConflict)
	if _, total, _ := db.FindOffers(ctx, OfferFilter{Now: now}); total != 1 {
		t.Errorf("catalogue after reinstating: %d offers, want 1", total)
	}
	// The old token stays revoked (it may have been misused); the flag
	// stays until cleared.
	_, _, err = db.FindAPIToken(ctx, raw)
	wantCode(t, err, market.CodeUnauthorized)
	if ts, _ := db.ListAPITokens(ctx, prov.ID); len(ts) != 1 || !ts[0].RevokedAt.Equal(now) {
		t.Errorf("tokens after reinstating: %+v, want the one revoked at the suspension", ts)
	}
	if flags, _ := db.ListOpenReservationFlags(ctx); len(flags) != 1 {
		t.Fatalf("flags after reinstating: %d, want 1", len(flags))
	}
	if err := db.ClearReservationFlag(ctx, admin.ID, flags[0].ID, "looked", now); err != nil {
		t.Fatal(err)
	}
	wantCode(t, db.ClearReservationFlag(ctx, admin.ID, flags[0].ID, "", now), market.CodeConflict)
	if flags, _ := db.ListOpenReservationFlags(ctx); len(flags) != 0 {
		t.Errorf("flags after clearing: %d", len(flags))
	}
	entries, _, _ := db.ListAudit(ctx, AuditFilter{ActorID: admin.ID})
	var actions []string
	for _, e := range entries {
		actions = append(actions, e.Action)
	}
	if strings.Join(actions, ",") != AuditReservationFlagClear+","+AuditProviderReinstate+","+AuditProviderSuspend {
		t.Errorf("audit actions = %v", actions)
	}
}

func TestProviderRecords(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "p@example.com", true)
	quiet := createUser(t, db, "q@example.com", true)
	buyer := createUser(t, db, "b@example.com", false)
	o := listedOffer(t, db, prov.ID, 8)
	start := o.AvailableFrom
	now := start.Add(-time.Hour)
	var pieceID int64
	for i := range 2 {
		r := book(t, db, buyer.ID, now, piece(o, 4+i, start.Add(time.Duration(i)*10*time.Hour), 5))
		if _, err := db.ConfirmReservation(ctx, r.ID, now); err != nil {
			t.Fatal(err)
		}
		pieceID = r.Pieces[0].ID
		if i == 1 {
			// One host of the second booking failed for 2 hours, acknowledged;
			// a second, unacknowledged report does not count.
			for _, ack := range []int{1, 0} {
				if _, err := db.writer.ExecContext(ctx, `INSERT INTO incidents (reservation_id, piece_id, kind, start_at, end_at, devices_affected, note, reported_by, reporter_id, acknowledged, created_at)
					VALUES (?, ?, ?, ?, ?, ?, 'x', 'provider', ?, ?, ?)`, r.ID, pieceID, string(market.IncidentHostFailure),
					unix(start.Add(11*time.Hour)), unix(start.Add(13*time.Hour)), 2, prov.ID, ack, unix(now)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	end := start.Add(20 * time.Hour)
	if _, err := db.AdvanceReservations(ctx, end); err != nil {
		t.Fatal(err)
	}
	recs, err := db.ProviderRecords(ctx, end)
	if err != nil {
		t.Fatal(err)
	}
	want := market.ProviderRecord{ProviderID: prov.ID, ApprovedOffers: 1, DeliveredReservations: 2, MaxDeliveredDevices: 5,
		RecentIncidents: 1, PromisedDeviceSeconds: (4*5 + 5*5) * 3600, LostDeviceSeconds: 2 * 2 * 3600}
	if recs[prov.ID] != want {
		t.Errorf("record = %+v\nwant       %+v", recs[prov.ID], want)
	}
	if _, ok := recs[quiet.ID]; ok {
		t.Errorf("a provider with no history has a record: %+v", recs[quiet.ID])
	}
	one, err := db.ProviderRecord(ctx, prov.ID, end)
	if err != nil || one != want {
		t.Errorf("ProviderRecord = %+v, %v", one, err)
	}
	if r, err := db.ProviderRecord(ctx, quiet.ID, end); err != nil || r != (market.ProviderRecord{ProviderID: quiet.ID}) {
		t.Errorf("quiet provider's record = %+v, %v", r, err)
	}
	// Outside the trailing window, delivery and incidents no longer count.
	later := end.Add(market.ReliabilityWindow + time.Hour)
	if r, _ := db.ProviderRecord(ctx, prov.ID, later); r.PromisedDeviceSeconds != 0 || r.RecentIncidents != 0 || r.DeliveredReservations != 2 {
		t.Errorf("record after the window = %+v", r)
	}
}

func TestAdminNotesRefuseControlCharacters(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	admin := testAdmin(t, db)
	prov := createUser(t, db, "p@example.com", true)
	o := listedOffer(t, db, prov.ID, 8)

	_, err := db.SuspendProvider(ctx, admin, prov.ID, "fraud\x00", t0)
	if market.FieldErrors(err)["reason"] == "" {
		t.Errorf("suspension reason with NUL: %v", err)
	}
	_, err = db.DecideOffer(ctx, admin, o.ID, market.ReviewRejected, "no\x1b[2J", t0)
	if market.FieldErrors(err)["note"] == "" {
		t.Errorf("review note with an escape: %v", err)
	}
	_, err = db.SaveRequest(ctx, prov.ID, "nightly\x07", `{"version":1}`, t0)
	if market.FieldErrors(err)["name"] == "" {
		t.Errorf("saved request name with a bell: %v", err)
	}
	// Line breaks in a note are fine.
	if _, err := db.SuspendProvider(ctx, admin, prov.ID, "Listed hardware it does not have.\nSee ticket 42.", t0); err != nil {
		t.Errorf("reason on two lines: %v", err)
	}
	if _, err := db.ReinstateProvider(ctx, admin, prov.ID, "o\u0085k", t0); market.FieldErrors(err)["note"] == "" {
		t.Errorf("reinstatement note with a C1 control: %v", err)
	}
}

// TestProvidersInTheSameOrderOnBothEngines: /admin/providers lists
// providers by name in one order whatever the engine and its collation —
// case-insensitive, accents after the plain alphabet, ties by id. The
// expected order is written out by hand.
func TestProvidersInTheSameOrderOnBothEngines(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	names := []string{"zed", "Émile", "bob", "Alice", "Zoë", "alice", "Bob", "Zoe", "adam", "émile", "_under", "Ärzte"}
	for i, n := range names {
		if _, err := db.CreateUser(ctx, market.User{Email: fmt.Sprintf("p%d@example.com", i), DisplayName: n, IsProvider: true}, []byte("h"), t0); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"_under", "adam", "Alice", "alice", "Bob", "bob", "zed", "Zoe", "Zoë", "Ärzte", "Émile", "émile"}
	ps, err := db.ListProviders(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(ps))
	for i, p := range ps {
		got[i] = p.User.DisplayName
	}
	if !slices.Equal(got, want) {
		t.Fatalf("providers in order %q; want %q", got, want)
	}
}

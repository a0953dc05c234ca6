package market

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"strconv"
	"testing"
	"time"
)

// noticeWords is every notice kind with a notice of it and the sentence
// it must say: written out by hand from the sentences the store composed
// before it kept kinds (and the notifications page and its e-mail showed),
// so a changed word shows here.
func noticeWords() []struct {
	kind NoticeKind
	p    NoticeParams
	want string
} {
	start := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
	end := start.Add(2 * time.Hour)
	until := time.Date(2026, 12, 3, 12, 30, 0, 0, time.UTC)
	return []struct {
		kind NoticeKind
		p    NoticeParams
		want string
	}{
		{NoticeText, NoticeParams{Text: "Any words at all."}, "Any words at all."},

		{NoticeListingApproved, NoticeParams{Title: "8× H100"}, "Your offer “8× H100” was approved and is listed in the catalogue."},
		{NoticeListingAutoApproved, NoticeParams{Title: "8× H100"}, "Your offer “8× H100” was approved automatically (clean track record) and is listed."},
		{NoticeListingRejected, NoticeParams{Title: "8× H100", Text: "No such GPU."}, "Your offer “8× H100” was rejected: No such GPU."},
		{NoticeListingChanges, NoticeParams{Title: "8× H100", Text: "State the all-reduce method."}, "Changes were requested on your offer “8× H100”: State the all-reduce method."},
		{NoticeAccountSuspended, NoticeParams{Text: "fraud"}, "Your account was suspended: fraud"},
		{NoticeAccountReinstated, NoticeParams{}, "Your account was reinstated; your approved offers are listed again."},

		{NoticeBookingHeld, NoticeParams{Reservation: 7, Start: start, End: end, Until: until},
			"Reservation #7 (3 Dec 2026 14:00 UTC – 3 Dec 2026 16:00 UTC) is held for you until 3 Dec 2026 12:30 UTC. Pay for it before then to confirm it; unpaid, the hold ends and the devices go back on the market."},
		{NoticeBookingExpired, NoticeParams{Reservation: 7, Until: until},
			"The hold on reservation #7 ended unpaid at 3 Dec 2026 12:30 UTC; its devices went back on the market. Search again to book."},
		{NoticePaymentArrived, NoticeParams{Reservation: 7, Amount: 12_345, Start: start},
			"Your payment of $123.45 arrived: reservation #7 is confirmed. It starts at 3 Dec 2026 14:00 UTC; its connection details will be on the reservation's page."},
		{NoticePaymentFailed, NoticeParams{Reservation: 7, Text: "card declined", Until: until},
			"The payment for reservation #7 did not go through (card declined). You can try again until its hold ends at 3 Dec 2026 12:30 UTC."},
		{NoticeBookingPaid, NoticeParams{Reservation: 7, Amount: 12_345}, "Booking #7 is paid and confirmed: $123.45 for your devices."},
		{NoticeReservationStarting, NoticeParams{Reservation: 7, Start: start, End: end},
			"Reservation #7 has started (3 Dec 2026 14:00 UTC – 3 Dec 2026 16:00 UTC). Its connection details — the hosts and how to reach them with your SSH key — are on the reservation's page."},
		{NoticeCancelledUnpaid, NoticeParams{Reservation: 7}, "You cancelled reservation #7; nothing was charged."},
		{NoticeCancelledPaid, NoticeParams{Reservation: 7, Refund: 9_000, Paid: 10_000, Fee: 1_000},
			"You cancelled reservation #7. $90.00 of the $100.00 you paid is refunded to your card; the cancellation fee is $10.00."},
		{NoticeCancelledFree, NoticeParams{Reservation: 7}, "The buyer cancelled booking #7 free of charge; its devices are free again."},
		{NoticeCancelledFeeKept, NoticeParams{Reservation: 7, Kept: 1_000, Payout: 900},
			"The buyer cancelled booking #7; its devices are free again. You keep $10.00 of cancellation fees: $9.00 after the platform fee, paid out with your other payouts."},
		{NoticeRejectedFounded, NoticeParams{Reservation: 7},
			"The buyer rejected booking #7 within its acceptance period after a failed acceptance test or a measured outage, and is refunded in full; nothing of it is paid out. Its devices are free again."},
		{NoticeRejectedUnfounded, NoticeParams{Reservation: 7, Kept: 250},
			"The buyer rejected booking #7 within its acceptance period with no failed acceptance test or measured outage: the minutes used are paid out to you ($2.50 before the platform fee), the rest refunded. Its devices are free again."},

		{NoticeStatementBuyer, NoticeParams{Reservation: 7, Paid: 10_000, Refund: 1_500},
			"The statement of reservation #7 is ready: you paid $100.00; $15.00 comes back to your card (SLA credits and time not charged)."},
		{NoticeStatementBuyer, NoticeParams{Reservation: 7, Paid: 10_000, Refund: 1_500, Credit: 300},
			"The statement of reservation #7 is ready: you paid $100.00; $15.00 comes back to your card (SLA credits and time not charged). The $3.00 of credits for incidents in the hours you resold goes to their buyer."},
		{NoticeStatementNoRefund, NoticeParams{Reservation: 7, Paid: 10_000},
			"The statement of reservation #7 is ready: you paid $100.00; the rental met its terms, so nothing is refunded."},
		{NoticeStatementProvider, NoticeParams{Reservation: 7, Kept: 9_000, Fee: 900, Payout: 8_100},
			"The statement of booking #7 is ready: you keep $90.00, the platform fee is $9.00, and your payout is $81.00."},
		{NoticeRefundSent, NoticeParams{Reservation: 7, Amount: 1_500},
			"A refund of $15.00 for reservation #7 is on its way to your card (SLA credits, time not charged, or a cancellation)."},
		{NoticeRefundSent, NoticeParams{Reservation: 7, Amount: 1_500, RefundFor: RefundForDispute},
			"A refund of $15.00 for reservation #7 is on its way to your card (a dispute credit)."},
		{NoticeRefundSent, NoticeParams{Reservation: 7, Amount: 1_500, RefundFor: RefundForPaymentException},
			"A refund of $15.00 for reservation #7 is on its way to your card (a payment that did not match the checkout)."},
		{NoticeRefundSent, NoticeParams{Reservation: 7, Amount: 1_500, RefundFor: RefundForResale},
			"A refund of $15.00 for reservation #7 is on its way to your card (the time you resold)."},
		{NoticePayoutSent, NoticeParams{Reservation: 7, Amount: 8_100}, "Payout of $81.00 for booking #7 sent to your connected account."},
		{NoticePayoutHeld, NoticeParams{Reservation: 7, Payout: 8_100},
			"Your payout of $81.00 for booking #7 is held until you finish connecting your payout account; it is sent as soon as you do."},

		{NoticeIncidentByBuyer, NoticeParams{Reservation: 7, Incident: IncidentHostFailure},
			"The buyer reported an incident on booking #7 (Host failure); acknowledge it or answer within 72 hours."},
		{NoticeIncidentByProvider, NoticeParams{Reservation: 7, Incident: IncidentPowerCurtailment},
			"The provider reported an incident on reservation #7 (Power curtailment); it counts in settlement."},
		{NoticeIncidentAcked, NoticeParams{Reservation: 7, Incident: IncidentNetworkDegradation},
			"The provider acknowledged your incident report on reservation #7 (Network degradation); it counts in settlement."},
		{NoticeIncidentNote, NoticeParams{Reservation: 7, Incident: IncidentUnderperformance},
			"The provider added a note to the Underperformance its agent measured on reservation #7."},
		{NoticeMessageFromBuyer, NoticeParams{Reservation: 7, Text: "Here is my key."},
			"The buyer of booking #7 wrote: “Here is my key.” Answer in the booking's messages."},
		{NoticeMessageFromProvider, NoticeParams{Reservation: 7, Text: "Added; ssh -p 2222 root@gpu1."},
			"The provider of reservation #7 wrote: “Added; ssh -p 2222 root@gpu1.” Answer in the reservation's messages."},
		{NoticeOutageToBuyer, NoticeParams{Reservation: 7, Incident: IncidentHostFailure, Devices: 2, Start: start, End: end},
			"The provider's agent measured an outage on reservation #7 (Host failure, 2 device(s), 3 Dec 2026 14:00 UTC – 3 Dec 2026 16:00 UTC); it counts in settlement."},
		{NoticeOutageToProvider, NoticeParams{Reservation: 7, Incident: IncidentUnderperformance, Devices: 1, Start: start, End: end, ShortBP: 4444},
			"Your agent's heartbeats show an outage on booking #7 (Underperformance, 1 device(s), 3 Dec 2026 14:00 UTC – 3 Dec 2026 16:00 UTC, 44.44% short); it counts in settlement."},

		{NoticeDisputeOpened, NoticeParams{Reservation: 7, Dispute: DisputeNotAsListed},
			"The buyer opened a dispute on reservation #7: “Hardware not as listed”. Your payout for it is frozen until an admin decides; answer with your side."},
		{NoticeDisputeProviderAnswer, NoticeParams{Reservation: 7}, "The provider answered your dispute on reservation #7."},
		{NoticeDisputeBuyerStatement, NoticeParams{Reservation: 7}, "The buyer added a statement to the dispute on reservation #7."},
		{NoticeDisputeNoCredit, NoticeParams{Reservation: 7, Text: "The logs show full use."},
			"The dispute on reservation #7 was rejected: no credit. Reason: The logs show full use."},
		{NoticeDisputeCreditToYou, NoticeParams{Reservation: 7, Amount: 2_000, Text: "Node 2 was down."},
			"The dispute on reservation #7 was decided with a credit of $20.00 to you. Reason: Node 2 was down."},
		{NoticeDisputeCreditToBuyer, NoticeParams{Reservation: 7, Amount: 2_000, Text: "Node 2 was down."},
			"The dispute on reservation #7 was decided with a credit of $20.00 to the buyer (your statement shows your part of it). Reason: Node 2 was down."},
		{NoticeChargebackClosed, NoticeParams{Reservation: 7, Text: "the bank ruled for the buyer"},
			"The chargeback on reservation #7 was closed: the bank ruled for the buyer"},

		{NoticeResaleSold, NoticeParams{Reservation: 7, Start: start, End: end, Price: 5_000, Fee: 500, Refund: 4_500},
			"Your resale listing of reservation #7 (3 Dec 2026 14:00 UTC – 3 Dec 2026 16:00 UTC) sold for $50.00. After the platform fee of $5.00, $45.00 is refunded to the card you paid with. Your access ends at 3 Dec 2026 14:00 UTC."},
		{NoticeResaleBought, NoticeParams{Reservation: 8, Start: start, End: end, Price: 5_000},
			"You bought reservation #8 on resale (3 Dec 2026 14:00 UTC – 3 Dec 2026 16:00 UTC) for $50.00. Your SSH keys are installed on its nodes from 3 Dec 2026 14:00 UTC."},
		{NoticeResaleUnsold, NoticeParams{Amount: 5_000},
			"The time you tried to buy on resale was sold to someone else first; your payment of $50.00 is refunded in full."},
		{NoticeResaleSettled, NoticeParams{Reservation: 8, Amount: 300},
			"Reservation #8, bought on resale, is settled: $3.00 of SLA credits for its incidents comes back to your card."},

		{NoticeOrderFilledHeld, NoticeParams{Order: 3, Reservation: 7, Devices: 8, Start: start, End: end, Amount: 12_345, Until: until},
			"Standing order #3 filled: reservation #7, 8 devices, 3 Dec 2026 14:00 UTC – 3 Dec 2026 16:00 UTC, for $123.45. It is held until 3 Dec 2026 12:30 UTC: pay for it before then to confirm it."},
		{NoticeOrderFilledCharging, NoticeParams{Order: 3, Reservation: 7, Devices: 8, Start: start, End: end, Amount: 12_345},
			"Standing order #3 filled: reservation #7, 8 devices, 3 Dec 2026 14:00 UTC – 3 Dec 2026 16:00 UTC, for $123.45. Your saved payment method is being charged for it."},
		{NoticeOrderFilledPaid, NoticeParams{Order: 3, Reservation: 7, Amount: 12_345, Start: start},
			"Standing order #3 filled and paid: reservation #7 is booked and your payment of $123.45 arrived. It starts at 3 Dec 2026 14:00 UTC; its connection details will be on the reservation's page."},
		{NoticeOrderExpired, NoticeParams{Order: 3, Limit: 250, LimitKind: LimitPerRefDeviceHour, Until: until},
			"Standing order #3 (limit $2.50 per reference device-hour) reached its fill-by date, 3 Dec 2026 12:30 UTC, without a quote within its limit. Nothing was booked."},
		{NoticeOrderCancelled, NoticeParams{Order: 3, Limit: 100_000, LimitKind: LimitTotalBudget},
			"You cancelled standing order #3 (limit $1,000.00 in total). Nothing was booked."},
		{NoticeOrderNote, NoticeParams{Order: 3, Text: "Your card was declined."}, "Standing order #3: Your card was declined."},
		{NoticeSpotWon, NoticeParams{Bid: 4, Devices: 2, Start: start, End: end, Price: 180, Max: 250, Reservation: 7, Amount: 720},
			"Spot bid #4 won 2 devices for 3 Dec 2026 14:00 UTC – 3 Dec 2026 16:00 UTC at $1.80 per device-hour (your maximum: $2.50); reservation #7, $7.20, is charged to your saved payment method."},
		{NoticeSpotPreempted, NoticeParams{Bid: 4, Start: start, Minutes: 5, Price: 310},
			"Spot bid #4 preempted at 14:00 UTC, 5 minutes' notice: it did not win the hour from 3 Dec 2026 14:00 UTC (clearing price $3.10 per device-hour). The bid stays live for later hours."},
		{NoticeSpotStopped, NoticeParams{Bid: 4, Text: "your saved card was not charged"},
			"Spot bid #4 stopped: the payment for a won hour did not go through (your saved card was not charged). The bid wins no further hours; the hour stays held for a few minutes for you to pay it another way, then its devices go back on the market."},
	}
}

func TestNoticeText(t *testing.T) {
	for _, c := range noticeWords() {
		if got := (Notice{Kind: c.kind, Params: c.p}).Text(); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.kind, got, c.want)
		}
	}
}

// Every notice kind declared in notification.go has words: it is in
// noticeWords (which checks them), and says more than an unknown kind
// does with the same values. A kind added without its sentence fails here.
func TestEveryNoticeKindHasWords(t *testing.T) {
	declared := declaredNoticeKinds(t)
	if len(declared) < 40 {
		t.Fatalf("found %d notice kinds in notification.go; the parse is wrong", len(declared))
	}
	tested := map[NoticeKind]bool{}
	for _, c := range noticeWords() {
		tested[c.kind] = true
		if c.kind == NoticeText {
			continue
		}
		n := Notice{Kind: c.kind, Params: c.p}
		if got, unknown := n.Text(), (Notice{Kind: "no_such_kind", Params: c.p}).Text(); got == "" || got == unknown {
			t.Errorf("kind %s says %q, as an unknown kind does", c.kind, got)
		}
	}
	for _, k := range declared {
		if !tested[k] {
			t.Errorf("notice kind %s has no sentence in noticeWords", k)
		}
	}
	if len(tested) != len(declared) {
		t.Errorf("noticeWords has %d kinds, notification.go declares %d", len(tested), len(declared))
	}
}

// declaredNoticeKinds are the values of every constant of type NoticeKind
// in notification.go, read from its source.
func declaredNoticeKinds(t *testing.T) []NoticeKind {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "notification.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []NoticeKind
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			if id, ok := v.Type.(*ast.Ident); !ok || id.Name != "NoticeKind" {
				continue
			}
			for _, val := range v.Values {
				lit, ok := val.(*ast.BasicLit)
				if !ok {
					t.Fatalf("notice kind %v is not a string literal", val)
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, NoticeKind(s))
			}
		}
	}
	return out
}

// The store keeps a notice's values as JSON: every field comes back as it
// went in, and the fields a kind does not use are left out.
func TestNoticeParamsJSON(t *testing.T) {
	at := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
	all := NoticeParams{Reservation: 1, Order: 2, Bid: 3, Title: "t", Text: "x", Amount: 4, Paid: 5, Refund: 6, Fee: 7, Kept: 8,
		Payout: 9, Credit: 10, Price: 11, Max: 12, Limit: 13, LimitKind: LimitTotalBudget, Incident: IncidentHostFailure,
		Dispute: DisputeCharge, RefundFor: RefundForDispute, Devices: 14, Minutes: 15, ShortBP: 16, Start: at, End: at.Add(time.Hour), Until: at.Add(-time.Hour)}
	// Every field is set, so a field added later without a value here fails.
	rv := reflect.ValueOf(all)
	for i := range rv.NumField() {
		if rv.Field(i).IsZero() {
			t.Fatalf("field %s is not set in the round trip", rv.Type().Field(i).Name)
		}
	}
	b, err := json.Marshal(all)
	if err != nil {
		t.Fatal(err)
	}
	var back NoticeParams
	if err := json.Unmarshal(b, &back); err != nil || back != all {
		t.Fatalf("round trip: %+v, %v; want %+v", back, err, all)
	}
	if b, err := json.Marshal(NoticeParams{Reservation: 7}); err != nil || string(b) != `{"reservation":7}` {
		t.Fatalf("one value: %s, %v", b, err)
	}
}

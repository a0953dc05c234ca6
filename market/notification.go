package market

import (
	"fmt"
	"time"
)

// A notification's words are not stored: the store keeps what it is (a
// NoticeKind) and the values that fill it in (NoticeParams), and Text
// writes the sentence where it is shown — the notifications page (web
// builds its view model with it) and the e-mail sent with it (workflow
// composes the message with it). One place holds every sentence, so the
// page and the mail read alike, and a sentence can be reworded without
// rewriting rows.

// NoticeKind is which sentence a notification says. Each kind reads its
// own fields of NoticeParams; TestEveryNoticeKindHasWords checks that
// every kind declared here has words.
type NoticeKind string

// NoticeText is a notification whose words are stored as they are, in
// NoticeParams.Text: every row written before the kinds existed
// (migration 0038) and free text given to the store as such.
const NoticeText NoticeKind = "text"

// Notice kinds of offer review and accounts, to the provider.
const (
	NoticeListingApproved     NoticeKind = "listing_approved"      // Title
	NoticeListingAutoApproved NoticeKind = "listing_auto_approved" // Title
	NoticeListingRejected     NoticeKind = "listing_rejected"      // Title, Text: the admin's reason
	NoticeListingChanges      NoticeKind = "listing_changes"       // Title, Text: the changes asked for
	NoticeAccountSuspended    NoticeKind = "account_suspended"     // Text: the reason
	NoticeAccountReinstated   NoticeKind = "account_reinstated"
)

// Notice kinds of booking, paying and cancelling.
const (
	NoticeBookingHeld         NoticeKind = "booking_held"         // Reservation, Start, End, Until: the hold's end
	NoticeBookingExpired      NoticeKind = "booking_expired"      // Reservation, Until: when the hold ended
	NoticePaymentArrived      NoticeKind = "payment_arrived"      // Reservation, Amount, Start
	NoticePaymentFailed       NoticeKind = "payment_failed"       // Reservation, Text: why, Until: the hold's end
	NoticeBookingPaid         NoticeKind = "booking_paid"         // to the provider: Reservation, Amount
	NoticeReservationStarting NoticeKind = "reservation_starting" // Reservation, Start, End
	NoticeCancelledUnpaid     NoticeKind = "cancelled_unpaid"     // to the buyer: Reservation
	NoticeCancelledPaid       NoticeKind = "cancelled_paid"       // to the buyer: Reservation, Refund, Paid, Fee
	NoticeCancelledFree       NoticeKind = "cancelled_free"       // to the provider: Reservation
	NoticeCancelledFeeKept    NoticeKind = "cancelled_fee_kept"   // to the provider: Reservation, Kept, Payout
	NoticeRejectedFounded     NoticeKind = "rejected_founded"     // to the provider: Reservation
	NoticeRejectedUnfounded   NoticeKind = "rejected_unfounded"   // to the provider: Reservation, Kept
)

// Notice kinds of settlement: statements, refunds and payouts.
const (
	NoticeStatementBuyer    NoticeKind = "statement_buyer"     // Reservation, Paid, Refund, Credit: resold hours' credits
	NoticeStatementNoRefund NoticeKind = "statement_no_refund" // Reservation, Paid
	NoticeStatementProvider NoticeKind = "statement_provider"  // Reservation, Kept, Fee, Payout
	NoticeRefundSent        NoticeKind = "refund_sent"         // Reservation, Amount, RefundFor
	NoticePayoutSent        NoticeKind = "payout_sent"         // Reservation, Amount
	NoticePayoutHeld        NoticeKind = "payout_held"         // Reservation, Payout
)

// Notice kinds of incidents.
const (
	NoticeIncidentByBuyer    NoticeKind = "incident_by_buyer"    // to the provider: Reservation, Incident
	NoticeIncidentByProvider NoticeKind = "incident_by_provider" // to the buyer: Reservation, Incident
	NoticeIncidentAcked      NoticeKind = "incident_acked"       // to the buyer: Reservation, Incident
	NoticeIncidentNote       NoticeKind = "incident_note"        // to the buyer: Reservation, Incident
	NoticeOutageToBuyer      NoticeKind = "outage_to_buyer"      // Reservation, Incident, Devices, Start, End, ShortBP
	NoticeOutageToProvider   NoticeKind = "outage_to_provider"   // Reservation, Incident, Devices, Start, End, ShortBP
)

// Notice kinds of a reservation's messages (access.go).
const (
	NoticeMessageFromBuyer    NoticeKind = "message_from_buyer"    // to the providers: Reservation, Text: the message's start
	NoticeMessageFromProvider NoticeKind = "message_from_provider" // to the buyer: Reservation, Text: the message's start
)

// Notice kinds of disputes.
const (
	NoticeDisputeOpened         NoticeKind = "dispute_opened"          // to the providers: Reservation, Dispute
	NoticeDisputeProviderAnswer NoticeKind = "dispute_provider_answer" // to the buyer: Reservation
	NoticeDisputeBuyerStatement NoticeKind = "dispute_buyer_statement" // to the providers: Reservation
	NoticeDisputeNoCredit       NoticeKind = "dispute_no_credit"       // Reservation, Text: the admin's reason
	NoticeDisputeCreditToYou    NoticeKind = "dispute_credit_to_you"   // to the buyer: Reservation, Amount, Text
	NoticeDisputeCreditToBuyer  NoticeKind = "dispute_credit_to_buyer" // to the providers: Reservation, Amount, Text
	NoticeChargebackClosed      NoticeKind = "chargeback_closed"       // Reservation, Text: the reason
)

// Notice kinds of resale.
const (
	NoticeResaleSold    NoticeKind = "resale_sold"    // to the seller: Reservation, Start, End, Price, Fee, Refund
	NoticeResaleBought  NoticeKind = "resale_bought"  // Reservation (the new one), Start, End, Price
	NoticeResaleUnsold  NoticeKind = "resale_unsold"  // Amount: the payment refunded
	NoticeResaleSettled NoticeKind = "resale_settled" // Reservation, Amount: the credits
)

// Notice kinds of standing orders and the spot market, to the buyer.
const (
	NoticeOrderFilledHeld     NoticeKind = "order_filled_held"     // Order, Reservation, Devices, Start, End, Amount, Until
	NoticeOrderFilledCharging NoticeKind = "order_filled_charging" // Order, Reservation, Devices, Start, End, Amount (rows before order_filled_paid)
	NoticeOrderFilledPaid     NoticeKind = "order_filled_paid"     // Order, Reservation, Amount, Start
	NoticeOrderExpired        NoticeKind = "order_expired"         // Order, Limit, LimitKind, Until: the fill-by date
	NoticeOrderCancelled      NoticeKind = "order_cancelled"       // Order, Limit, LimitKind
	NoticeOrderNote           NoticeKind = "order_note"            // Order, Text: the order's note
	NoticeSpotWon             NoticeKind = "spot_won"              // Bid, Devices, Start, End, Price, Max, Reservation, Amount
	NoticeSpotPreempted       NoticeKind = "spot_preempted"        // Bid, Start: the hour, Minutes: notice, Price
	NoticeSpotStopped         NoticeKind = "spot_stopped"          // Bid, Text: why the payment failed
)

// RefundFor says what a refund to the buyer's card is for.
type RefundFor string

// What refunds are for.
const (
	RefundForTerms            RefundFor = ""                  // SLA credits, time not charged, or a cancellation
	RefundForDispute          RefundFor = "dispute"           // a dispute credit
	RefundForPaymentException RefundFor = "payment_exception" // a payment that did not match its checkout
	RefundForResale           RefundFor = "resale"            // the seller's credit for time resold
)

// Text is what the refund is for, as a person reads it.
func (f RefundFor) Text() string {
	switch f {
	case RefundForDispute:
		return "a dispute credit"
	case RefundForPaymentException:
		return "a payment that did not match the checkout"
	case RefundForResale:
		return "the time you resold"
	}
	return "SLA credits, time not charged, or a cancellation"
}

// NoticeParams are the named values a notification's sentence is filled
// with; a kind reads only the fields its comment names. The store keeps
// them as JSON, so a field is renamed only with a migration.
type NoticeParams struct {
	Reservation int64  `json:"reservation,omitzero"`
	Order       int64  `json:"order,omitzero"`
	Bid         int64  `json:"bid,omitzero"`
	Title       string `json:"title,omitzero"` // an offer's title
	// Text is words that come with the event rather than from a sentence
	// here — an admin's reason, a processor's decline message — or, for
	// NoticeText, all the words.
	Text      string         `json:"text,omitzero"`
	Amount    Cents          `json:"amount,omitzero"`
	Paid      Cents          `json:"paid,omitzero"`
	Refund    Cents          `json:"refund,omitzero"`
	Fee       Cents          `json:"fee,omitzero"`
	Kept      Cents          `json:"kept,omitzero"`
	Payout    Cents          `json:"payout,omitzero"`
	Credit    Cents          `json:"credit,omitzero"`
	Price     Cents          `json:"price,omitzero"`
	Max       Cents          `json:"max,omitzero"`
	Limit     Cents          `json:"limit,omitzero"`
	LimitKind OrderLimitKind `json:"limit_kind,omitzero"`
	Incident  IncidentKind   `json:"incident,omitzero"`
	Dispute   DisputeReason  `json:"dispute,omitzero"`
	RefundFor RefundFor      `json:"refund_for,omitzero"`
	Devices   int            `json:"devices,omitzero"`
	Minutes   int            `json:"minutes,omitzero"`
	ShortBP   int            `json:"short_bp,omitzero"` // how far short an underperformance was, in basis points
	Start     time.Time      `json:"start,omitzero"`
	End       time.Time      `json:"end,omitzero"`
	Until     time.Time      `json:"until,omitzero"`
}

// Notice is what a notification says: the kind of sentence and its values.
type Notice struct {
	Kind   NoticeKind
	Params NoticeParams
}

// TextNotice is a notice of stored words (NoticeText).
func TextNotice(words string) Notice {
	return Notice{Kind: NoticeText, Params: NoticeParams{Text: words}}
}

// Text is the notice's words, as the notifications page and its e-mail
// show them. A kind this version does not know (a row written by a newer
// one) says its Text parameter, which is "" unless it came with words.
func (n Notice) Text() string {
	p := n.Params
	r := p.Reservation
	switch n.Kind {
	case NoticeText:
		return p.Text

	case NoticeListingApproved:
		return fmt.Sprintf("Your offer “%s” was approved and is listed in the catalogue.", p.Title)
	case NoticeListingAutoApproved:
		return fmt.Sprintf("Your offer “%s” was approved automatically (clean track record) and is listed.", p.Title)
	case NoticeListingRejected:
		return fmt.Sprintf("Your offer “%s” was rejected: %s", p.Title, p.Text)
	case NoticeListingChanges:
		return fmt.Sprintf("Changes were requested on your offer “%s”: %s", p.Title, p.Text)
	case NoticeAccountSuspended:
		return "Your account was suspended: " + p.Text
	case NoticeAccountReinstated:
		return "Your account was reinstated; your approved offers are listed again."

	case NoticeBookingHeld:
		return fmt.Sprintf("Reservation #%d (%s) is held for you until %s. Pay for it before then to confirm it; unpaid, the hold ends and the devices go back on the market.",
			r, FormatSpan(p.Start, p.End), FormatTime(p.Until))
	case NoticeBookingExpired:
		return fmt.Sprintf("The hold on reservation #%d ended unpaid at %s; its devices went back on the market. Search again to book.", r, FormatTime(p.Until))
	case NoticePaymentArrived:
		return fmt.Sprintf("Your payment of %s arrived: reservation #%d is confirmed. It starts at %s; its connection details will be on the reservation's page.",
			p.Amount, r, FormatTime(p.Start))
	case NoticePaymentFailed:
		return fmt.Sprintf("The payment for reservation #%d did not go through (%s). You can try again until its hold ends at %s.", r, p.Text, FormatTime(p.Until))
	case NoticeBookingPaid:
		return fmt.Sprintf("Booking #%d is paid and confirmed: %s for your devices.", r, p.Amount)
	case NoticeReservationStarting:
		return fmt.Sprintf("Reservation #%d has started (%s). Its connection details — the hosts and how to reach them with your SSH key — are on the reservation's page.",
			r, FormatSpan(p.Start, p.End))
	case NoticeCancelledUnpaid:
		return fmt.Sprintf("You cancelled reservation #%d; nothing was charged.", r)
	case NoticeCancelledPaid:
		return fmt.Sprintf("You cancelled reservation #%d. %s of the %s you paid is refunded to your card; the cancellation fee is %s.", r, p.Refund, p.Paid, p.Fee)
	case NoticeCancelledFree:
		return fmt.Sprintf("The buyer cancelled booking #%d free of charge; its devices are free again.", r)
	case NoticeCancelledFeeKept:
		return fmt.Sprintf("The buyer cancelled booking #%d; its devices are free again. You keep %s of cancellation fees: %s after the platform fee, paid out with your other payouts.",
			r, p.Kept, p.Payout)
	case NoticeRejectedFounded:
		return fmt.Sprintf("The buyer rejected booking #%d within its acceptance period after a failed acceptance test or a measured outage, and is refunded in full; nothing of it is paid out. Its devices are free again.", r)
	case NoticeRejectedUnfounded:
		return fmt.Sprintf("The buyer rejected booking #%d within its acceptance period with no failed acceptance test or measured outage: the minutes used are paid out to you (%s before the platform fee), the rest refunded. Its devices are free again.", r, p.Kept)

	case NoticeStatementBuyer:
		s := fmt.Sprintf("The statement of reservation #%d is ready: you paid %s; %s comes back to your card (SLA credits and time not charged).", r, p.Paid, p.Refund)
		if p.Credit > 0 {
			s += fmt.Sprintf(" The %s of credits for incidents in the hours you resold goes to their buyer.", p.Credit)
		}
		return s
	case NoticeStatementNoRefund:
		return fmt.Sprintf("The statement of reservation #%d is ready: you paid %s; the rental met its terms, so nothing is refunded.", r, p.Paid)
	case NoticeStatementProvider:
		return fmt.Sprintf("The statement of booking #%d is ready: you keep %s, the platform fee is %s, and your payout is %s.", r, p.Kept, p.Fee, p.Payout)
	case NoticeRefundSent:
		return fmt.Sprintf("A refund of %s for reservation #%d is on its way to your card (%s).", p.Amount, r, p.RefundFor.Text())
	case NoticePayoutSent:
		return fmt.Sprintf("Payout of %s for booking #%d sent to your connected account.", p.Amount, r)
	case NoticePayoutHeld:
		return fmt.Sprintf("Your payout of %s for booking #%d is held until you finish connecting your payout account; it is sent as soon as you do.", p.Payout, r)

	case NoticeIncidentByBuyer:
		return fmt.Sprintf("The buyer reported an incident on booking #%d (%s); acknowledge it or answer within 72 hours.", r, p.Incident.Label())
	case NoticeIncidentByProvider:
		return fmt.Sprintf("The provider reported an incident on reservation #%d (%s); it counts in settlement.", r, p.Incident.Label())
	case NoticeIncidentAcked:
		return fmt.Sprintf("The provider acknowledged your incident report on reservation #%d (%s); it counts in settlement.", r, p.Incident.Label())
	case NoticeIncidentNote:
		return fmt.Sprintf("The provider added a note to the %s its agent measured on reservation #%d.", p.Incident.Label(), r)
	case NoticeMessageFromBuyer:
		return fmt.Sprintf("The buyer of booking #%d wrote: “%s” Answer in the booking's messages.", r, p.Text)
	case NoticeMessageFromProvider:
		return fmt.Sprintf("The provider of reservation #%d wrote: “%s” Answer in the reservation's messages.", r, p.Text)
	case NoticeOutageToBuyer:
		return fmt.Sprintf("The provider's agent measured an outage on reservation #%d (%s); it counts in settlement.", r, p.outage())
	case NoticeOutageToProvider:
		return fmt.Sprintf("Your agent's heartbeats show an outage on booking #%d (%s); it counts in settlement.", r, p.outage())

	case NoticeDisputeOpened:
		return fmt.Sprintf("The buyer opened a dispute on reservation #%d: “%s”. Your payout for it is frozen until an admin decides; answer with your side.", r, p.Dispute.Label())
	case NoticeDisputeProviderAnswer:
		return fmt.Sprintf("The provider answered your dispute on reservation #%d.", r)
	case NoticeDisputeBuyerStatement:
		return fmt.Sprintf("The buyer added a statement to the dispute on reservation #%d.", r)
	case NoticeDisputeNoCredit:
		return fmt.Sprintf("The dispute on reservation #%d was rejected: no credit. Reason: %s", r, p.Text)
	case NoticeDisputeCreditToYou:
		return fmt.Sprintf("The dispute on reservation #%d was decided with a credit of %s to you. Reason: %s", r, p.Amount, p.Text)
	case NoticeDisputeCreditToBuyer:
		return fmt.Sprintf("The dispute on reservation #%d was decided with a credit of %s to the buyer (your statement shows your part of it). Reason: %s", r, p.Amount, p.Text)
	case NoticeChargebackClosed:
		return fmt.Sprintf("The chargeback on reservation #%d was closed: %s", r, p.Text)

	case NoticeResaleSold:
		return fmt.Sprintf("Your resale listing of reservation #%d (%s) sold for %s. After the platform fee of %s, %s is refunded to the card you paid with. Your access ends at %s.",
			r, FormatSpan(p.Start, p.End), p.Price, p.Fee, p.Refund, FormatTime(p.Start))
	case NoticeResaleBought:
		return fmt.Sprintf("You bought reservation #%d on resale (%s) for %s. Your SSH keys are installed on its nodes from %s.",
			r, FormatSpan(p.Start, p.End), p.Price, FormatTime(p.Start))
	case NoticeResaleUnsold:
		return fmt.Sprintf("The time you tried to buy on resale was sold to someone else first; your payment of %s is refunded in full.", p.Amount)
	case NoticeResaleSettled:
		return fmt.Sprintf("Reservation #%d, bought on resale, is settled: %s of SLA credits for its incidents comes back to your card.", r, p.Amount)

	case NoticeOrderFilledHeld:
		return p.orderFilled() + fmt.Sprintf("It is held until %s: pay for it before then to confirm it.", FormatTime(p.Until))
	case NoticeOrderFilledCharging:
		return p.orderFilled() + "Your saved payment method is being charged for it."
	case NoticeOrderFilledPaid:
		return fmt.Sprintf("Standing order #%d filled and paid: reservation #%d is booked and your payment of %s arrived. It starts at %s; its connection details will be on the reservation's page.",
			p.Order, r, p.Amount, FormatTime(p.Start))
	case NoticeOrderExpired:
		return fmt.Sprintf("Standing order #%d (limit %s) reached its fill-by date, %s, without a quote within its limit. Nothing was booked.",
			p.Order, p.limit(), FormatTime(p.Until))
	case NoticeOrderCancelled:
		return fmt.Sprintf("You cancelled standing order #%d (limit %s). Nothing was booked.", p.Order, p.limit())
	case NoticeOrderNote:
		return fmt.Sprintf("Standing order #%d: %s", p.Order, p.Text)
	case NoticeSpotWon:
		return fmt.Sprintf("Spot bid #%d won %d devices for %s at %s per device-hour (your maximum: %s); reservation #%d, %s, is charged to your saved payment method.",
			p.Bid, p.Devices, FormatSpan(p.Start, p.End), p.Price, p.Max, r, p.Amount)
	case NoticeSpotPreempted:
		return fmt.Sprintf("Spot bid #%d preempted at %s, %d minutes' notice: it did not win the hour from %s (clearing price %s per device-hour). The bid stays live for later hours.",
			p.Bid, p.Start.UTC().Format("15:04 UTC"), p.Minutes, FormatTime(p.Start), p.Price)
	case NoticeSpotStopped:
		return fmt.Sprintf("Spot bid #%d stopped: the payment for a won hour did not go through (%s). The bid wins no further hours; the hour stays held for a few minutes for you to pay it another way, then its devices go back on the market.", p.Bid, p.Text)
	}
	return p.Text
}

// outage is a measured outage as its notifications describe it: kind,
// devices and span, and how far short for an underperformance.
func (p NoticeParams) outage() string {
	s := fmt.Sprintf("%s, %d device(s), %s", p.Incident.Label(), p.Devices, FormatSpan(p.Start, p.End))
	if p.Incident == IncidentUnderperformance {
		s += fmt.Sprintf(", %s%% short", FormatPercentBP(p.ShortBP))
	}
	return s
}

// orderFilled is the first sentence of a fill's notification, with the
// space before the next.
func (p NoticeParams) orderFilled() string {
	return fmt.Sprintf("Standing order #%d filled: reservation #%d, %d devices, %s, for %s. ",
		p.Order, p.Reservation, p.Devices, FormatSpan(p.Start, p.End), p.Amount)
}

// limit is a standing order's limit as a person reads it.
func (p NoticeParams) limit() string {
	return StandingOrder{LimitKind: p.LimitKind, LimitCents: p.Limit}.LimitText()
}

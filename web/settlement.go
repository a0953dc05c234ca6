package web

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
	"github.com/gpumarket/gpumarket/workflow"
)

// settlementNote writes, for a buyer (providerID 0) or a provider, where
// the reservation's settlement stands, and reports whether it has started.
func (h *Handler) settlementNote(ctx context.Context, reservationID, providerID int64, note *string) bool {
	s, err := h.db.FindSettlement(ctx, reservationID)
	if err != nil {
		if market.ErrorCode(err) != market.CodeNotFound {
			h.log.Error("find settlement", "reservation_id", reservationID, "err", err)
		}
		return false
	}
	*note = settlementStateText(s, providerID)
	return true
}

func settlementStateText(s store.Settlement, providerID int64) string {
	switch s.State {
	case store.SettlementDone:
		if s.Statement.Rejected && providerID == 0 {
			return fmt.Sprintf("Rejection settled on %s: %s refunded, everything you paid.", formatTime(s.SettledAt), s.RefundCents)
		}
		if s.Statement.Rejected {
			return "Rejection settled on " + formatTime(s.SettledAt) + ": the buyer is refunded in full; nothing of it is paid out."
		}
		if s.Statement.Cancelled && providerID == 0 {
			return fmt.Sprintf("Cancellation settled on %s: %s refunded (what was paid less the %s cancellation fee).",
				formatTime(s.SettledAt), s.RefundCents, s.Statement.Kept)
		}
		if s.Statement.Cancelled {
			return "Cancellation settled on " + formatTime(s.SettledAt) + ": the buyer is refunded, and your share of the cancellation fee is paid."
		}
		return "Settled on " + formatTime(s.SettledAt) + "."
	case store.SettlementPending:
		if s.Attempts > 0 {
			return "Settlement pending: retrying (the payment processor did not answer; nothing is lost and nothing is paid twice)."
		}
		return "Settlement in progress."
	case store.SettlementFailed:
		return "Settlement pending: the marketplace's team is looking into a problem with the payment processor."
	case store.SettlementWaiting:
		for _, t := range s.Transfers {
			if providerID != 0 && t.ProviderID != providerID {
				continue
			}
			if t.State == store.TransferHeld {
				if providerID != 0 {
					return "Refund made. Your payout is held until you connect payouts on the Bookings page; it is released automatically then."
				}
				return "Refund made. The provider's payout is held until they finish connecting payouts."
			}
			if t.State == store.TransferFrozen {
				if providerID != 0 {
					return "Refund made. Your payout is frozen while a dispute is open; it is released when an admin decides."
				}
				return "Refund made. The provider's payout is frozen while a dispute is open."
			}
		}
		if providerID != 0 {
			return "Refund made and your payout sent; other providers' payouts are still waiting."
		}
		return "Refund made; other providers' payouts are still waiting."
	}
	return "Settlement in progress."
}

// settlementBadge is the one-or-two-word state of a settlement for its
// buyer (providerID 0) or one of its providers: the buyer's refund is made
// once the settlement waits only on payouts.
func settlementBadge(s store.Settlement, providerID int64) string {
	switch s.State {
	case store.SettlementDone:
		return "settled"
	case store.SettlementWaiting:
		if providerID == 0 {
			return "refunded"
		}
		for _, t := range s.Transfers {
			if t.ProviderID != providerID {
				continue
			}
			switch t.State {
			case store.TransferHeld:
				return "payout held"
			case store.TransferFrozen:
				return "payout frozen"
			}
		}
		return "paid"
	case store.SettlementFailed:
		return "delayed"
	}
	return "in progress"
}

func (h *Handler) handleBuyerStatement(c echo.Context) error {
	r, err := h.buyerReservation(c)
	if err != nil {
		return err
	}
	if r.ResaleOf != 0 {
		return h.resaleHolderStatement(c, r, fmt.Sprintf("/reservations/%d", r.ID))
	}
	return h.renderStatement(c, r, 0, fmt.Sprintf("/reservations/%d", r.ID))
}

func (h *Handler) handleProviderStatement(c echo.Context) error {
	r, _, err := h.providerReservation(c)
	if err != nil {
		return err
	}
	return h.renderStatement(c, r, currentUser(c).ID, fmt.Sprintf("/provider/bookings/%d", r.ID))
}

// renderStatement shows the statement of r to its buyer (providerID 0) or
// one of its providers. Before the settlement exists the page says what it
// waits for, when it waits for an acknowledgement; otherwise not found.
func (h *Handler) renderStatement(c echo.Context, r market.Reservation, providerID int64, back string) error {
	ctx := c.Request().Context()
	title := fmt.Sprintf("Statement %d", r.ID)
	s, err := h.db.FindSettlement(ctx, r.ID)
	if market.ErrorCode(err) == market.CodeNotFound {
		incs, ierr := h.db.ListIncidents(ctx, r.ID)
		if ierr != nil {
			return ierr
		}
		note := awaitingNote(r, incs, providerID)
		if note == "" {
			return err
		}
		v := views.StatementView{ReservationID: strconv.FormatInt(r.ID, 10), ForProvider: providerID != 0, BackURL: back,
			Lead: "The statement is computed when the booking is settled.", State: "waiting for the provider", StateNote: note, Awaiting: true, Simulated: h.simulated()}
		return render(c, http.StatusOK, views.Statement(h.page(c, title), v))
	}
	if err != nil {
		return err
	}
	v, err := h.statementView(ctx, s, providerID)
	if err != nil {
		return err
	}
	v.BackURL = back
	if providerID == 0 {
		v.Replace, err = h.replacementPanel(ctx, r, h.now())
	} else {
		v.ProviderReplace, err = h.providerReplacementPanel(ctx, r, providerID)
		if err == nil {
			err = h.markReplacementPieces(ctx, &v, r, s.Statement, providerID)
		}
	}
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.Statement(h.page(c, title), v))
}

// awaitingUntil is when the buyer reports among incs still awaiting the
// provider's acknowledgement stop holding up the settlement (the last
// report's deadline, after which it becomes a dispute); zero when none
// awaits.
func awaitingUntil(incs []store.Incident) time.Time {
	var until time.Time
	for _, i := range incs {
		if i.ReportedBy != store.ReportedByBuyer || i.Acknowledged || !i.DisputedAt.IsZero() {
			continue
		}
		if d := i.CreatedAt.Add(workflow.IncidentAckDeadline); d.After(until) {
			until = d
		}
	}
	return until
}

// awaitingText says, for the buyer (providerID 0), a provider or an admin
// (-1), that a settlement waits for the provider's acknowledgement until.
func awaitingText(until time.Time, providerID int64) string {
	msg := awaitingHead(until) + " "
	switch {
	case providerID > 0:
		return msg + "Acknowledge the buyer's incident report below to let it count and the booking settle; unacknowledged by then, it becomes a dispute for the marketplace's admins and the booking is settled without it."
	case providerID == 0:
		return msg + "The booking is settled once the provider acknowledges your incident report; if they do not by then, the report goes to the marketplace's admins as a dispute and the booking is settled without it."
	}
	return msg + "Unacknowledged by then, the buyer's report becomes a dispute and the booking is settled without it."
}

// awaitingHead is the short form of awaitingText.
func awaitingHead(until time.Time) string {
	return "Waiting for the provider's acknowledgement until " + formatTime(until) + "."
}

// awaitingNote is the note for a completed reservation whose settlement
// has not started because a buyer's report awaits the provider's
// acknowledgement; empty otherwise. For a provider it asks them to act
// when the report is on one of their pieces.
func awaitingNote(r market.Reservation, incs []store.Incident, providerID int64) string {
	if r.State != market.ReservationCompleted {
		return ""
	}
	until := awaitingUntil(incs)
	if until.IsZero() {
		return ""
	}
	if providerID == 0 {
		return awaitingText(until, 0)
	}
	theirs := map[int64]bool{}
	for _, p := range r.Pieces {
		theirs[p.ID] = p.ProviderID == providerID
	}
	var mine []store.Incident
	for _, i := range incs {
		if theirs[i.PieceID] {
			mine = append(mine, i)
		}
	}
	if awaitingUntil(mine).IsZero() {
		return awaitingText(until, -1)
	}
	return awaitingText(until, providerID)
}

// statementView itemises a settlement: for the buyer (providerID 0) every
// piece, the dispute credits and what the providers were paid; for a
// provider only their own pieces, their part of each dispute credit and
// their payout. Both show lines that add up to what was paid, with the
// dispute credits applied since the statement was computed, and the payout
// actually transferred.
func (h *Handler) statementView(ctx context.Context, s store.Settlement, providerID int64) (views.StatementView, error) {
	st := s.Statement
	forProvider := providerID != 0
	v := views.StatementView{ReservationID: strconv.FormatInt(s.ReservationID, 10), ForProvider: forProvider,
		State: settlementBadge(s, providerID), StateNote: settlementStateText(s, providerID), Simulated: h.simulated()}
	v.Lead = "Delivered device-hours, uptime and every clause of the terms that gave money back."
	switch {
	case st.Rejected && forProvider:
		v.Lead = "A rental the buyer rejected in its acceptance period: refunded in full."
		v.Cancelled = "The buyer rejected this rental on " + formatTime(st.CancelledAt) +
			", within its acceptance period: the buyer is refunded in full, and nothing of it is paid out or charged as a fee."
	case st.Rejected:
		v.Lead = "A rental you rejected in its acceptance period: refunded in full."
		v.Cancelled = "You rejected this rental on " + formatTime(st.CancelledAt) +
			", within its acceptance period: everything you paid is refunded in full; the provider is paid nothing."
	case st.Cancelled && forProvider:
		v.Lead = "A cancelled reservation: the buyer's refund and your share of the cancellation fee."
		v.Cancelled = "The buyer cancelled this reservation on " + formatTime(st.CancelledAt) +
			", before it started: the buyer is refunded what they paid less the cancellation fee, and you keep the fee less the platform fee."
	case st.Cancelled:
		v.Lead = "A cancelled reservation: your refund and the cancellation fee."
		v.Cancelled = "You cancelled this reservation on " + formatTime(st.CancelledAt) +
			", before it started: you are refunded what you paid less the cancellation fee, which the provider keeps less the platform fee."
	}
	var paid, notCharged, refund, kept market.Cents
	var reserved, promised, delivered int64
	cache := map[int64]pieceInfo{}
	for _, p := range st.Pieces {
		if forProvider && p.ProviderID != providerID {
			continue
		}
		info, err := h.pieceInfo(ctx, p.OfferID, cache)
		if err != nil {
			return v, err
		}
		pv := views.StatementPieceView{
			Title: info.title, Basis: p.Basis.Label(), Window: formatSpan(p.Start, p.End), Paid: p.Paid.String(),
			Refund: p.Refund.String(), Fee: p.Fee.String(), Payout: p.Payout.String(),
		}
		if !st.Cancelled {
			pv.Usage = fmt.Sprintf("Delivered %s of %s device-hours · uptime %s%% (guaranteed %s%%)", market.FormatDeviceHours(p.DeliveredDeviceSeconds),
				market.FormatDeviceHours(p.ReservedDeviceSeconds), market.FormatPercentBP(p.UptimeBP), market.FormatPercentBP(p.GuaranteeBP))
		}
		for _, cl := range p.Clauses {
			kind := "not charged"
			switch {
			case cl.SLA:
				kind = "SLA credit"
			case cl.Kind == market.ClauseCancellation:
				kind = "refunded on cancellation"
			case cl.Kind == market.ClauseRejection:
				kind = "refunded on rejection"
			}
			dh := "—"
			if cl.DeviceSeconds > 0 {
				dh = market.FormatDeviceHours(cl.DeviceSeconds)
			}
			pv.Clauses = append(pv.Clauses, views.StatementClauseRow{Label: cl.Label, DeviceHours: dh,
				Rate: market.FormatPercentBP(cl.RateBP) + "%", Amount: cl.Cents.String(), Kind: kind})
		}
		if p.CreditsBeforeCap > p.Credits {
			pv.CreditsNote = fmt.Sprintf("SLA credits of %s are capped at %s by the offer's terms.", p.CreditsBeforeCap, p.CreditCap)
		}
		v.Pieces = append(v.Pieces, pv)
		paid += p.Paid
		notCharged += p.NotCharged + p.Credits
		refund += p.Refund
		kept += p.Kept
		reserved += p.ReservedDeviceSeconds
		promised += p.PromisedDeviceSeconds
		delivered += p.DeliveredDeviceSeconds
	}

	// What each provider keeps, pays in fees and is paid now, after the
	// dispute credits; the payout is the transfer's amount, which is what
	// was (or will be) sent.
	transfers := map[int64]store.SettlementTransfer{}
	for _, t := range s.Transfers {
		transfers[t.ProviderID] = t
	}
	var fee, payout market.Cents
	for _, pp := range st.Payouts() {
		if forProvider && pp.ProviderID != providerID {
			continue
		}
		fee += pp.Fee
		if t, ok := transfers[pp.ProviderID]; ok {
			payout += t.Amount
		} else {
			payout += pp.Payout
		}
	}
	if t, ok := transfers[providerID]; ok && forProvider {
		v.PayoutState = transferStateText(t)
	}

	disputes, err := h.db.ListReservationDisputeCases(ctx, s.ReservationID)
	if err != nil {
		return v, err
	}
	var dt disputeTotals
	v.Disputes, dt = statementDisputes(st, disputes, providerID)
	if len(v.Disputes) > 0 {
		v.PiecesNote = "Per piece, the fee and payout as first settled; the dispute credits above changed them to the figures in the summary."
	}
	v.Lines, v.Check = summaryLines(st, summaryTotals{paid: paid, notCharged: notCharged, refund: refund, kept: kept, fee: fee, payout: payout,
		reserved: reserved, promised: promised, delivered: delivered, disputes: dt, providers: len(transfers)}, forProvider)
	if len(st.Pending) > 0 {
		v.Pending = fmt.Sprintf("%d incident report(s) were not acknowledged and are not counted; they went to the admins as disputes.", len(st.Pending))
	}
	if st.ResaleListingID != 0 && !forProvider {
		if err := h.resaleSellerLines(ctx, &v, st, s.ReservationID, refund+dt.credit); err != nil {
			return v, err
		}
	}
	account := market.BuyerAccount(s.BuyerID)
	if forProvider {
		account = market.ProviderAccount(providerID)
	}
	if v.Extras.Ledger, err = h.ledgerRows(ctx, s.ReservationID, account); err != nil {
		return v, err
	}
	return v, nil
}

// disputeTotals sums the dispute credits a reader sees on a statement.
type disputeTotals struct {
	n                   int // disputes listed
	credit, taken, loss market.Cents
}

// statementDisputes lists the dispute credits applied to st, one row per
// dispute: for the buyer (providerID 0) the whole credit and its refund,
// for a provider their part, what was taken from what they keep, the fee
// given back and what the marketplace bore.
func statementDisputes(st market.Statement, cases []store.DisputeCase, providerID int64) ([]views.StatementDisputeRow, disputeTotals) {
	byID := map[int64]store.DisputeCase{}
	for _, d := range cases {
		byID[d.ID] = d
	}
	var t disputeTotals
	var order []int64
	sums := map[int64]*market.DisputeCredit{}
	for _, dc := range st.DisputeCredits {
		if providerID != 0 && dc.ProviderID != providerID {
			continue
		}
		t.credit += dc.Credit
		t.taken += dc.Taken
		t.loss += dc.Loss
		sum, ok := sums[dc.DisputeID]
		if !ok {
			sum = &market.DisputeCredit{DisputeID: dc.DisputeID, Chargeback: dc.Chargeback}
			sums[dc.DisputeID] = sum
			order = append(order, dc.DisputeID)
		}
		sum.Credit += dc.Credit
		sum.Taken += dc.Taken
		sum.Loss += dc.Loss
		sum.FeeBefore += dc.FeeBefore
		sum.FeeAfter += dc.FeeAfter
	}
	rows := make([]views.StatementDisputeRow, 0, len(order))
	for _, id := range order {
		sum, d := sums[id], byID[id]
		label := fmt.Sprintf("Dispute %d", id)
		if d.Reason != "" {
			label += " (" + d.Reason.Label() + ")"
		}
		row := views.StatementDisputeRow{Label: label, URL: fmt.Sprintf("/disputes/%d", id), Credit: sum.Credit.String(),
			Taken: sum.Taken.String(), FeeBack: (sum.FeeBefore - sum.FeeAfter).String(), Loss: sum.Loss.String()}
		switch {
		case sum.Chargeback:
			row.State = "returned by the buyer's bank (chargeback)"
		case d.RefundState == store.DisputeRefundDone:
			row.State = "refunded"
		default:
			row.State = "refund pending"
		}
		rows = append(rows, row)
	}
	t.n = len(rows)
	return rows, t
}

// summaryTotals are the figures of a statement's summary for its reader.
type summaryTotals struct {
	paid, notCharged, refund, kept, fee, payout market.Cents
	reserved, promised, delivered               int64
	disputes                                    disputeTotals
	providers                                   int
}

// summaryLines are a statement's summary lines and the sentence that
// shows they add up: for the buyer, paid = refund (settlement and dispute
// credits) + fee + payout − what the marketplace bore; for a provider,
// paid = refund at settlement + dispute credits taken + fee + payout.
func summaryLines(st market.Statement, t summaryTotals, forProvider bool) ([]views.StatementLine, string) {
	var lines []views.StatementLine
	line := func(label string, amount market.Cents, testID string, total bool) {
		lines = append(lines, views.StatementLine{Label: label, Amount: amount.String(), TestID: testID, Total: total})
	}
	d := t.disputes
	if forProvider {
		line("Paid for your pieces", t.paid, "statement-paid", true)
	} else {
		line("Paid", t.paid, "statement-paid", true)
	}
	if st.Rejected {
		line("Refunded in full on rejection", t.refund, "statement-sla-refund", false)
	} else if st.Cancelled {
		line("Refunded on cancellation", t.refund, "statement-sla-refund", false)
		line("Cancellation fee kept by the provider", t.kept, "statement-cancel-fee", false)
	} else {
		uptime := market.UptimeBP(t.delivered, t.promised)
		lines = append(lines,
			views.StatementLine{Label: "Device-hours delivered", Amount: market.FormatDeviceHours(t.delivered) + " of " + market.FormatDeviceHours(t.reserved), TestID: "statement-delivered"},
			views.StatementLine{Label: "Uptime", Amount: market.FormatPercentBP(uptime) + "%", TestID: "statement-uptime"})
		line("Credits and time not charged", t.notCharged, "statement-credits", false)
		line("Refunded at settlement", t.refund, "statement-sla-refund", false)
	}
	switch {
	case d.n > 0 && forProvider:
		line("Your part of the dispute credits", d.credit, "statement-dispute-credits", false)
	case d.n > 0:
		line("Dispute credits", d.credit, "statement-dispute-credits", false)
	}
	if forProvider {
		line("Refund to the buyer", t.refund+d.credit, "statement-refund", true)
	} else {
		line("Refund to you", t.refund+d.credit, "statement-refund", true)
	}
	if forProvider && d.n > 0 {
		line("Dispute credits taken from your payout", d.taken, "statement-dispute-taken", false)
	}
	line("Platform fee ("+market.FormatPercentBP(st.PlatformFeeBP)+"%)", t.fee, "statement-fee", false)
	switch {
	case forProvider:
		line("Your payout", t.payout, "statement-payout", true)
	case t.providers > 1:
		line("Payout to the providers", t.payout, "statement-payout", true)
	default:
		line("Payout to the provider", t.payout, "statement-payout", true)
	}
	if d.loss > 0 {
		line("Dispute credits borne by the marketplace", d.loss, "statement-loss", false)
	}

	if forProvider {
		check := fmt.Sprintf("%s paid = %s refunded", t.paid, t.refund)
		if d.n > 0 {
			check += fmt.Sprintf(" + %s dispute credits taken", d.taken)
		}
		check += fmt.Sprintf(" + %s platform fee + %s payout.", t.fee, t.payout)
		if d.loss > 0 {
			check += fmt.Sprintf(" The marketplace bore the other %s of your part of the dispute credits.", d.loss)
		}
		return lines, check
	}
	check := fmt.Sprintf("%s refunded + %s platform fee + %s payout", t.refund+d.credit, t.fee, t.payout)
	if d.loss > 0 {
		check += fmt.Sprintf(" − %s borne by the marketplace", d.loss)
	}
	return lines, check + fmt.Sprintf(" = %s paid.", t.paid)
}

// resaleSellerLines makes the statement of a reservation whose time was
// resold (total refunded at settlement, dispute credits included) say what came back to its seller in all, and why: the refund at
// settlement less the resold hours' SLA credits, which went to their buyer
// (Statement.ResaleCredit), plus the sale's credit (price less the
// platform's fee), refunded when the time sold — instead of a "Refund to
// you" that counts the buyer's part and leaves out the sale.
func (h *Handler) resaleSellerLines(ctx context.Context, v *views.StatementView, st market.Statement, reservationID int64, total market.Cents) error {
	ls, err := h.db.ListReservationResales(ctx, reservationID)
	if err != nil {
		return err
	}
	var sale market.ResaleListing
	for _, l := range ls {
		if l.ID == st.ResaleListingID {
			sale = l
		}
	}
	if sale.ID == 0 {
		return nil
	}
	var lines []views.StatementLine
	for _, l := range v.Lines {
		if l.TestID != "statement-refund" {
			lines = append(lines, l)
			continue
		}
		mine := total - st.ResaleCredit
		lines = append(lines,
			views.StatementLine{Label: "SLA credits of the hours you resold, to their buyer", Amount: "−" + st.ResaleCredit.String(), TestID: "statement-resale-sla"},
			views.StatementLine{Label: "Refund to you at settlement", Amount: mine.String(), TestID: "statement-refund"},
			views.StatementLine{Label: fmt.Sprintf("Resale credit: the price %s less the %s platform fee", sale.Price, sale.Fee), Amount: sale.Credit.String(), TestID: "statement-resale-credit"},
			views.StatementLine{Label: "Came back to you in all", Amount: (mine + sale.Credit).String(), TestID: "statement-back-in-all", Total: true})
		v.Pending = joinSentences(v.Pending, fmt.Sprintf("You resold this booking's time from %s for %s: %s of it, after the platform fee, was refunded to your card as the resale credit. At settlement the refund is %s: %s of it are the SLA credits of incidents in the hours you resold, which went to their buyer, and %s came to you. So %s came back to you in all.",
			formatTime(sale.From), sale.Price, sale.Credit, total, st.ResaleCredit, mine, mine+sale.Credit))
	}
	v.Lines = lines
	return nil
}

// resaleHolderStatement is the statement of time bought on resale: it
// settles with the booking it was bought from (market.SettleResold), so
// its page shows what the holder paid and what of the original's
// statement came back to them — the SLA credits of their hours.
func (h *Handler) resaleHolderStatement(c echo.Context, r market.Reservation, back string) error {
	ctx := c.Request().Context()
	sale, bought, err := h.boughtOnResale(ctx, r.ID)
	if err != nil {
		return err
	}
	if !bought {
		return market.Errorf(market.CodeNotFound, "There is no statement for this reservation yet.")
	}
	title := fmt.Sprintf("Statement %d", r.ID)
	v := views.StatementView{ReservationID: strconv.FormatInt(r.ID, 10), BackURL: back, Simulated: h.simulated(),
		Lead: fmt.Sprintf("Time bought on resale settles with the booking it was bought from (#%d), under its terms.", sale.ReservationID)}
	s, err := h.db.FindSettlement(ctx, sale.ReservationID)
	if market.ErrorCode(err) == market.CodeNotFound {
		v.State, v.Awaiting = "waiting", true
		v.StateNote = "The statement is computed when the booking your time was bought from is settled, after its end."
		return render(c, http.StatusOK, views.Statement(h.page(c, title), v))
	}
	if err != nil {
		return err
	}
	credit := s.Statement.ResaleCredit
	state := "refunded to your card"
	if credit > 0 && !sale.SLACreditDone {
		state = "being refunded to your card"
	}
	v.State = "settled"
	v.Lines = []views.StatementLine{
		{Label: "Paid on resale", Amount: sale.Price.String(), TestID: "statement-paid", Total: true},
		{Label: "SLA credits for incidents in your hours, " + state, Amount: credit.String(), TestID: "statement-sla-refund"},
		{Label: "Refund to you", Amount: credit.String(), TestID: "statement-refund", Total: true},
	}
	v.Check = fmt.Sprintf("You paid %s for the time from %s; the provider is paid through the original booking, so nothing of your price is a payout or fee on this statement.", sale.Price, formatTime(sale.From))
	return render(c, http.StatusOK, views.Statement(h.page(c, title), v))
}

// ledgerRows are a reservation's ledger entries that debit or credit
// account, each described for the account's holder, the way its money went.
func (h *Handler) ledgerRows(ctx context.Context, reservationID int64, account string) ([]views.LedgerRow, error) {
	es, err := h.db.ListLedger(ctx, reservationID)
	if err != nil {
		return nil, err
	}
	var out []views.LedgerRow
	for _, e := range es {
		if e.Debit != account && e.Credit != account {
			continue
		}
		out = append(out, views.LedgerRow{At: formatTime(e.At), Kind: e.Kind, What: e.Describe(account), Amount: e.Amount.String(), Ref: e.StripeRef})
	}
	return out, nil
}

// transferStateText is a provider's payout of one settlement, in a sentence.
func transferStateText(t store.SettlementTransfer) string {
	switch t.State {
	case store.TransferDone:
		if t.Amount == 0 {
			return "No payout: nothing is left to pay you."
		}
		return fmt.Sprintf("Payout of %s paid to your connected account.", t.Amount)
	case store.TransferHeld:
		return fmt.Sprintf("Payout of %s held until you connect payouts.", t.Amount)
	case store.TransferFrozen:
		return fmt.Sprintf("Payout of %s frozen while a dispute is open.", t.Amount)
	}
	return fmt.Sprintf("Payout of %s pending.", t.Amount)
}

// providerPayouts builds the payout panel of the provider's bookings page.
func (h *Handler) providerPayouts(ctx context.Context, providerID int64, pieces []store.ProviderPiece) (views.ProviderPayouts, error) {
	v := views.ProviderPayouts{Simulated: h.simulated(), ConnectURL: "/provider/payouts/connect", ConnectText: "Connect payouts", State: "not connected"}
	acct, err := h.db.FindPayoutAccount(ctx, providerID)
	switch {
	case err == nil && acct.Onboarded():
		v.Onboarded, v.State = true, "connected — payouts enabled"
	case err == nil:
		v.State, v.ConnectText = "onboarding not finished — payouts held", "Finish connecting payouts"
	case market.ErrorCode(err) != market.CodeNotFound:
		return v, err
	}
	seen := map[int64]bool{}
	for _, p := range pieces {
		// A cancelled reservation is listed when it was paid, so it has a
		// settlement: the provider's share of the cancellation fee.
		if seen[p.ReservationID] || (p.State != market.ReservationCompleted && p.State != market.ReservationSettled && p.State != market.ReservationCancelled) {
			continue
		}
		seen[p.ReservationID] = true
		id := strconv.FormatInt(p.ReservationID, 10)
		row := views.ProviderSettlementRow{ReservationID: id, BookingURL: "/provider/bookings/" + id, State: "not yet settled", Payout: "—"}
		s, err := h.db.FindSettlement(ctx, p.ReservationID)
		switch {
		case err == nil:
			row.StatementURL = "/provider/bookings/" + id + "/statement"
			row.State = settlementStateText(s, providerID)
			if s.Statement.Cancelled {
				if providerKept(s.Statement, providerID) == 0 {
					continue // cancelled free of charge: nothing of it is the provider's
				}
			}
			for _, t := range s.Transfers {
				if t.ProviderID == providerID {
					row.Payout = t.Amount.String()
				}
			}
		case market.ErrorCode(err) != market.CodeNotFound:
			return v, err
		case p.State == market.ReservationCancelled:
			continue
		default:
			incs, err := h.db.ListIncidents(ctx, p.ReservationID)
			if err != nil {
				return v, err
			}
			if until := awaitingUntil(incs); !until.IsZero() {
				row.State = awaitingHead(until)
			}
		}
		v.Settlements = append(v.Settlements, row)
	}
	return v, nil
}

// providerKept is what a provider keeps of a statement now (after dispute
// credits), before the platform fee.
func providerKept(st market.Statement, providerID int64) market.Cents {
	for _, pp := range st.Payouts() {
		if pp.ProviderID == providerID {
			return pp.Kept
		}
	}
	return 0
}

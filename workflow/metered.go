package workflow

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// Metered rentals and prepaid balances (docs/metered.md): the buyer tops
// up a balance, starts a rental of an offer that allows it, and the
// background tick draws its usable minutes from the balance to the
// provider, exactly once under the background lease.

// refuseMetered refuses what is for blocks of hours (extending, reselling,
// rejecting for a refund of what was paid up front) on a metered rental,
// which runs until stopped and is paid by the minute.
func (s *Service) refuseMetered(ctx context.Context, reservationID int64) error {
	_, err := s.db.FindMeteredRental(ctx, reservationID)
	switch market.ErrorCode(err) {
	case market.CodeNotFound:
		return nil
	case "":
		return market.Errorf(market.CodeConflict, "A metered rental runs until you stop it and is paid by the minute: it cannot be extended, resold or rejected for a refund. Stop it instead.")
	}
	return err
}

// SetOfferMetered lets the provider's offer be rented metered, with the
// provider's notice to stop a rental for a booking (0: the default), or
// stops allowing it.
func (s *Service) SetOfferMetered(ctx context.Context, providerID, offerID int64, allow bool, noticeMinutes int) error {
	return s.db.SetOfferMetered(ctx, providerID, offerID, allow, noticeMinutes, s.now())
}

// TopUpWithSavedCard tops up the buyer's balance by amount from the
// buyer's default saved card: the top-up is recorded pending first, then
// charged under its key (market.TopUpKey) and recorded paid with its entry
// in the balance ledger. A crash in between leaves it pending for the tick
// (meteredTick), whose retry under the same key charges once. A declined
// card is a CodeConflict error with a message for the buyer.
func (s *Service) TopUpWithSavedCard(ctx context.Context, buyerID int64, amount market.Cents) (store.TopUp, error) {
	if err := market.ValidateTopUp(amount); err != nil {
		return store.TopUp{}, err
	}
	if _, err := s.defaultMethod(ctx, buyerID); err != nil {
		return store.TopUp{}, err
	}
	t, err := s.db.CreateTopUp(ctx, buyerID, amount, store.TopUpSaved, s.now())
	if err != nil {
		return store.TopUp{}, err
	}
	return s.chargeTopUp(ctx, t)
}

// StartTopUpCheckout starts a top-up of the buyer's balance by amount on
// the processor's hosted payment page and returns where to send the buyer:
// the top-up is recorded pending with the checkout, and is paid when the
// buyer comes back to urls.Success ("?top_up=<id>" added: CompleteTopUpCheckout)
// or the processor's checkout event arrives, whichever is first.
func (s *Service) StartTopUpCheckout(ctx context.Context, buyerID int64, amount market.Cents, urls CheckoutURLs) (string, error) {
	if err := market.ValidateTopUp(amount); err != nil {
		return "", err
	}
	t, err := s.db.CreateTopUp(ctx, buyerID, amount, store.TopUpCheckout, s.now())
	if err != nil {
		return "", err
	}
	co, err := s.pay.CreateCheckout(ctx, billing.CheckoutInput{TopUpID: t.ID, Amount: amount, Description: fmt.Sprintf("Balance top-up #%d", t.ID),
		SuccessURL: urls.Success + "?top_up=" + strconv.FormatInt(t.ID, 10), CancelURL: urls.Cancel, IdempotencyKey: market.TopUpKey(t.ID)})
	if err != nil {
		return "", err
	}
	if err := s.db.SetTopUpCheckout(ctx, t.ID, co.ID, s.now()); err != nil {
		return "", err
	}
	return co.URL, nil
}

// CompleteTopUpCheckout is the buyer's return from a top-up's hosted
// payment: the checkout is read from the processor and, once paid, the
// top-up recorded paid (once, whichever of this and the event comes
// first). Another buyer's top-up is not found; one not paid yet a conflict.
func (s *Service) CompleteTopUpCheckout(ctx context.Context, buyerID, topUpID int64) (store.TopUp, error) {
	t, err := s.db.FindTopUp(ctx, buyerID, topUpID)
	if err != nil {
		return store.TopUp{}, err
	}
	if t.State == store.TopUpPaid {
		return t, nil
	}
	if t.CheckoutID == "" {
		return store.TopUp{}, market.Errorf(market.CodeConflict, "This top-up has not been paid.")
	}
	if err := s.completeTopUpCheckout(ctx, t.ID, t.CheckoutID, ""); err != nil {
		return store.TopUp{}, err
	}
	return s.db.FindTopUp(ctx, buyerID, topUpID)
}

// completeTopUpCheckout records a top-up paid by its checkout, read from
// the processor (an event's word alone is not taken for the amount).
func (s *Service) completeTopUpCheckout(ctx context.Context, topUpID int64, checkoutID, paymentIntentID string) error {
	co, err := s.pay.RetrieveCheckout(ctx, checkoutID)
	if err != nil {
		return err
	}
	if !co.Paid {
		return market.Errorf(market.CodeConflict, "This top-up has not been paid yet.")
	}
	if co.PaymentIntentID != "" {
		paymentIntentID = co.PaymentIntentID
	}
	t, err := s.db.RecordTopUpPaid(ctx, topUpID, paymentIntentID, s.now())
	if err != nil {
		return err
	}
	s.log.Info("balance topped up on the payment page", "buyer_id", t.BuyerID, "top_up_id", t.ID, "amount_cents", int64(t.Amount))
	return nil
}

// chargeTopUp makes a pending saved-card top-up's charge and records its
// outcome.
func (s *Service) chargeTopUp(ctx context.Context, t store.TopUp) (store.TopUp, error) {
	m, err := s.defaultMethod(ctx, t.BuyerID)
	if err != nil {
		return store.TopUp{}, err
	}
	p, err := s.pay.ChargeSaved(ctx, billing.ChargeInput{Customer: m.Customer, PaymentMethodID: m.ProcessorMethodID, Amount: t.Amount,
		Description: fmt.Sprintf("Balance top-up #%d", t.ID), IdempotencyKey: market.TopUpKey(t.ID),
		Metadata: map[string]string{"top_up_id": strconv.FormatInt(t.ID, 10)}})
	if d, ok := billing.AsDecline(err); ok {
		msg := declineMessage(d, m.Label)
		if err := s.db.RecordTopUpFailed(ctx, t.ID, msg, s.now()); err != nil {
			return store.TopUp{}, err
		}
		return store.TopUp{}, market.Errorf(market.CodeConflict, "%s", msg)
	}
	if err != nil {
		return store.TopUp{}, err
	}
	if !p.Succeeded {
		return store.TopUp{}, market.Errorf(market.CodeConflict, "The card payment is still being processed; your balance is topped up as soon as it goes through.")
	}
	t, err = s.db.RecordTopUpPaid(ctx, t.ID, p.ID, s.now())
	if err != nil {
		return store.TopUp{}, err
	}
	s.log.Info("balance topped up", "buyer_id", t.BuyerID, "top_up_id", t.ID, "amount_cents", int64(t.Amount))
	return t, nil
}

// StartMetered starts a metered rental of devices on the offer for the
// buyer now (store.StartMeteredRental: the booking transaction, the
// balance covering its first minutes); maxMinutes > 0 stops it there. The
// agents of its nodes are told at once.
func (s *Service) StartMetered(ctx context.Context, buyerID, offerID int64, devices, maxMinutes int) (store.MeteredRental, error) {
	m, err := s.db.StartMeteredRental(ctx, buyerID, offerID, devices, maxMinutes, s.now())
	if err != nil {
		return store.MeteredRental{}, err
	}
	s.wakeAgents(ctx, m.ReservationID)
	s.log.Info("metered rental started", "reservation_id", m.ReservationID, "buyer_id", buyerID, "offer_id", offerID, "devices", devices)
	return m, nil
}

// StopMetered stops the buyer's metered rental now: its devices are freed
// and the agents remove access; the last minutes are drawn by the tick.
func (s *Service) StopMetered(ctx context.Context, buyerID, reservationID int64) (store.MeteredRental, error) {
	m, err := s.db.StopMeteredRental(ctx, buyerID, reservationID, s.now())
	if err != nil {
		return store.MeteredRental{}, err
	}
	s.wakeAgents(ctx, m.ReservationID)
	s.log.Info("metered rental stopped by the buyer", "reservation_id", m.ReservationID)
	return m, nil
}

// RefundBalance refunds amount (0: all) of the buyer's unused balance to
// the payments that paid it, newest first, never more to one than it paid
// (store.RequestBalanceRefund); each part is refunded now under its key,
// and by the tick if the processor fails.
func (s *Service) RefundBalance(ctx context.Context, buyerID int64, amount market.Cents) ([]store.BalanceRefundPart, error) {
	parts, err := s.db.RequestBalanceRefund(ctx, buyerID, amount, s.now())
	if err != nil {
		return nil, err
	}
	for _, p := range parts {
		s.refundBalancePart(ctx, p)
	}
	return parts, nil
}

func (s *Service) refundBalancePart(ctx context.Context, p store.BalanceRefundPart) {
	r, err := s.pay.Refund(ctx, p.PaymentIntentID, p.Amount, p.Key())
	if err != nil {
		s.log.Warn("balance refund not made; retried by the background work", "top_up_id", p.TopUpID, "err", err)
		if err := s.db.RecordBalanceRefundFailure(ctx, p.RefundID, p.TopUpID, err.Error()); err != nil {
			s.log.Error("balance refund failure not recorded", "err", err)
		}
		return
	}
	if err := s.db.RecordBalanceRefund(ctx, p.RefundID, p.TopUpID, r.ID, s.now()); err != nil {
		s.log.Error("balance refund made but not recorded; retried under its key", "top_up_id", p.TopUpID, "refund_id", r.ID, "err", err)
	}
}

// meteredTick is the background round of metered money at now: every
// open rental is metered (store.MeterRental: clock, draws, stops,
// capacity ahead), the agents of those that stopped are told, the
// earnings of final rentals are paid to providers who can be paid, and
// saved-card top-ups and balance refunds left pending by a crash or a
// processor failure are made again under their keys.
func (s *Service) meteredTick(ctx context.Context, now time.Time) {
	ids, err := s.db.ListOpenMeteredRentals(ctx)
	if err != nil {
		s.log.Error("background: list metered rentals", "err", err)
	}
	for _, id := range ids {
		st, err := s.db.MeterRental(ctx, id, s.feeBP, now)
		if err != nil {
			s.log.Error("background: meter rental", "reservation_id", id, "err", err)
			continue
		}
		if st.Stopped {
			s.wakeAgents(ctx, id)
			s.log.Info("metered rental stopped", "reservation_id", id, "reason", st.Rental.StopReason)
		}
		if st.DrewMinutes > 0 {
			s.log.Info("metered draw", "reservation_id", id, "minutes", st.DrewMinutes, "cents", int64(st.DrewCents))
		}
	}
	s.payMeteredEarnings(ctx)
	tops, err := s.db.ListTopUps(ctx, 0)
	if err != nil {
		s.log.Error("background: list top-ups", "err", err)
	}
	for _, t := range tops {
		if t.State == store.TopUpPending && (t.Method == store.TopUpSaved || t.Method == store.TopUpAuto) && now.Sub(t.CreatedAt) >= market.ChargeRetryGrace {
			if _, err := s.chargeTopUp(ctx, t); err != nil {
				s.log.Warn("pending top-up not charged", "top_up_id", t.ID, "err", err)
			}
		}
	}
	parts, err := s.db.ListPendingBalanceRefunds(ctx)
	if err != nil {
		s.log.Error("background: list balance refunds", "err", err)
	}
	for _, p := range parts {
		s.refundBalancePart(ctx, p)
	}
	s.autoTopUps(ctx, now)
}

// SetAutoTopUp sets the buyer's automatic top-up: below threshold the
// background work tops the balance up by amount from the default saved
// card (both zero clears it; setting it resumes one paused by a decline).
func (s *Service) SetAutoTopUp(ctx context.Context, buyerID int64, threshold, amount market.Cents) error {
	if err := market.ValidateAutoTopUp(threshold, amount); err != nil {
		return err
	}
	if threshold != 0 {
		if _, err := s.defaultMethod(ctx, buyerID); err != nil {
			return err
		}
	}
	return s.db.SetAutoTopUp(ctx, buyerID, threshold, amount, s.now())
}

// autoTopUps tops up every balance below its buyer's threshold from the
// saved card: the top-up is recorded pending first (store.StartAutoTopUp,
// at most one pending per buyer), then charged under its key by
// chargeTopUp; a decline pauses it and notifies the buyer once
// (store.RecordTopUpFailed), a crash leaves it pending for the retry above.
func (s *Service) autoTopUps(ctx context.Context, now time.Time) {
	ids, err := s.db.ListAutoTopUpBuyers(ctx)
	if err != nil {
		s.log.Error("background: list auto top-ups", "err", err)
		return
	}
	for _, id := range ids {
		t, ok, err := s.db.StartAutoTopUp(ctx, id, now)
		if err != nil {
			s.log.Error("background: start auto top-up", "buyer_id", id, "err", err)
			continue
		}
		if !ok {
			continue
		}
		if err := s.db.ConfirmLease(ctx); err != nil {
			return // the pending top-up is charged by the replica holding the lease
		}
		if _, err := s.chargeTopUp(ctx, t); err != nil {
			s.log.Warn("automatic top-up not made", "buyer_id", id, "top_up_id", t.ID, "err", err)
		}
	}
}

// payMeteredEarnings pays each final rental's earnings, less the platform
// fee already entered, to its provider's connected account, once under the
// payout's key; a provider not onboarded yet is paid when they are.
func (s *Service) payMeteredEarnings(ctx context.Context) {
	due, err := s.db.ListDueMeteredPayouts(ctx)
	if err != nil {
		s.log.Error("background: list metered payouts", "err", err)
		return
	}
	for _, m := range due {
		acct, err := s.db.FindPayoutAccount(ctx, m.ProviderID)
		if err != nil || !acct.Onboarded() {
			continue // held until the provider finishes onboarding
		}
		if err := s.db.ConfirmLease(ctx); err != nil {
			return
		}
		tr, err := s.pay.Transfer(ctx, acct.AccountID, m.Payout, market.TransferGroup(m.ReservationID),
			market.MeteredPayoutKey(m.ReservationID, market.EntryTransfer))
		if err != nil {
			s.log.Warn("metered payout not made; retried next round", "reservation_id", m.ReservationID, "err", err)
			continue
		}
		if err := s.db.RecordMeteredTransfer(ctx, m.ReservationID, tr.ID, s.now()); err != nil {
			s.log.Error("metered payout made but not recorded; retried under its key", "reservation_id", m.ReservationID, "err", err)
		}
	}
}

// reconcileMetered is Reconcile's part for balances and metered rentals:
// the balance ledger well formed; per buyer the balance equal to top-ups
// less draws less refunds, and no refund above what a top-up paid; per
// rental the draws equal to its minutes at its price (market.MeteredCents)
// and, once paid out, fee plus payout equal to the draws; saved-card
// top-ups left pending past their grace; and each top-up's payment
// against the processor unless ledgerOnly.
func (s *Service) reconcileMetered(ctx context.Context, ledgerOnly bool) ([]Difference, map[string]bool, error) {
	entries, err := s.db.ListBalanceEntries(ctx, 0)
	if err != nil {
		return nil, nil, err
	}
	var out []Difference
	add := func(id int64, what, ledger, processor string) {
		out = append(out, Difference{ReservationID: id, What: what, Ledger: ledger, Processor: processor})
	}
	if err := market.CheckBalanceLedger(entries); err != nil {
		add(0, "balance ledger malformed", err.Error(), "")
	}
	known := map[string]bool{}
	byRental := map[int64]map[string]market.Cents{}
	buyers := map[int64]bool{}
	for _, e := range entries {
		buyers[e.BuyerID] = true
		if e.StripeRef != "" {
			known[e.StripeRef] = true
		}
		if e.ReservationID != 0 {
			if byRental[e.ReservationID] == nil {
				byRental[e.ReservationID] = map[string]market.Cents{}
			}
			byRental[e.ReservationID][e.Kind] += e.Amount
		}
	}
	for id := range buyers {
		sum := market.SummarizeBalance(id, entries)
		if sum.Balance != sum.TopUps-sum.Draws-sum.Refunds {
			add(0, fmt.Sprintf("buyer %d: balance is not top-ups − draws − refunds", id), sum.Balance.String(), (sum.TopUps - sum.Draws - sum.Refunds).String())
		}
	}
	rentals, err := s.db.ListMeteredRentals(ctx, 0)
	if err != nil {
		return nil, nil, err
	}
	for _, m := range rentals {
		k := byRental[m.ReservationID]
		if want := market.MeteredCents(m.DrawnMinutes, m.Price, m.Devices); k[market.EntryDraw] != want || m.DrawnCents != want {
			add(m.ReservationID, fmt.Sprintf("metered draws differ from %d minutes × %s × %d devices / 60", m.DrawnMinutes, m.Price, m.Devices),
				k[market.EntryDraw].String(), want.String())
		}
		if m.TransferRef != "" && k[market.EntryFee]+k[market.EntryTransfer] != k[market.EntryDraw] {
			add(m.ReservationID, "metered earnings paid out differ from the draws", (k[market.EntryFee] + k[market.EntryTransfer]).String(), k[market.EntryDraw].String())
		}
	}
	tops, err := s.db.ListTopUps(ctx, 0)
	if err != nil {
		return nil, nil, err
	}
	for _, t := range tops {
		if t.Refunded > t.Amount {
			add(0, fmt.Sprintf("top-up %d refunded more than it paid", t.ID), t.Refunded.String(), t.Amount.String())
		}
		if t.State == store.TopUpPending && (t.Method == store.TopUpSaved || t.Method == store.TopUpAuto) && s.now().Sub(t.CreatedAt) >= market.ChargeRetryGrace {
			add(0, fmt.Sprintf("top-up %d recorded but not finished", t.ID), t.Amount.String(), t.LastError)
		}
		if t.State != store.TopUpPaid || ledgerOnly {
			continue
		}
		p, err := s.pay.RetrievePayment(ctx, t.PaymentIntentID)
		switch {
		case err != nil:
			add(0, fmt.Sprintf("top-up %d payment %s cannot be retrieved", t.ID, t.PaymentIntentID), t.Amount.String(), remoteError(err))
		case !p.Succeeded:
			add(0, fmt.Sprintf("top-up %d payment %s has not succeeded", t.ID, t.PaymentIntentID), t.Amount.String(), p.Status)
		case p.AmountReceived != t.Amount:
			add(0, fmt.Sprintf("top-up %d payment %s amount differs", t.ID, t.PaymentIntentID), t.Amount.String(), p.AmountReceived.String())
		}
	}
	return out, known, nil
}

package workflow

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// minCheckoutExpiry is the shortest checkout expiry Stripe accepts.
const minCheckoutExpiry = 31 * time.Minute

// Simulated reports whether payments only pretend to move money (the local
// test processor): pages say so plainly.
func (s *Service) Simulated() bool { return s.pay.Simulated() }

// CheckoutURLs are where the processor's hosted pages send the person back.
type CheckoutURLs struct {
	Success, Cancel string
}

// StartCheckout starts paying a held reservation of the buyer's: a hosted
// checkout for its amount, recorded against the reservation, and the
// address the buyer is sent to. Only a payable reservation (market.Payable)
// gets one.
func (s *Service) StartCheckout(ctx context.Context, buyer market.User, reservationID int64, back CheckoutURLs, describe func(market.Reservation) string) (string, error) {
	r, err := s.db.FindBuyerReservation(ctx, buyer.ID, reservationID)
	if err != nil {
		return "", err
	}
	now := s.now()
	if err := market.Payable(r, now); err != nil {
		return "", err
	}
	in := billing.CheckoutInput{
		ReservationID: r.ID, Amount: r.AmountCents, BuyerEmail: buyer.Email, Description: describe(r),
		SuccessURL: back.Success, CancelURL: back.Cancel,
		IdempotencyKey: market.EntryKey(r.ID, "checkout", 0),
	}
	// Stripe refuses expiries under 30 minutes away; a checkout that
	// outlives the hold is safe anyway: a late payment is refunded in full.
	if r.HoldExpiresAt.Sub(now) >= minCheckoutExpiry {
		in.ExpiresAt = r.HoldExpiresAt
	}
	co, err := s.pay.CreateCheckout(ctx, in)
	if err != nil {
		return "", err
	}
	if err := s.db.RecordCheckout(ctx, buyer.ID, r.ID, co.ID, r.AmountCents, now); err != nil {
		return "", err
	}
	s.log.Info("checkout started", "reservation_id", r.ID, "checkout_id", co.ID, "amount_cents", int64(r.AmountCents))
	return co.URL, nil
}

// ApplyWebhook verifies one webhook delivery from the processor and applies
// its event once. A bad or missing signature is a market invalid error and
// changes nothing; any other error means "retry later".
func (s *Service) ApplyWebhook(ctx context.Context, log *slog.Logger, body []byte, signature string) error {
	ev, err := s.pay.ParseWebhook(body, signature)
	if err != nil {
		return market.Errorf(market.CodeInvalid, "%s", market.ErrorMessage(err))
	}
	if err := s.ApplyEvent(ctx, log, ev); err != nil {
		log.Error("webhook not applied", "event_id", ev.ID, "type", ev.StripeType, "err", err)
		return fmt.Errorf("workflow: apply webhook event %s: %w", ev.ID, err)
	}
	return nil
}

// ConnectPayouts creates the provider's connected account at the processor
// if they have none, and returns the processor's onboarding address.
func (s *Service) ConnectPayouts(ctx context.Context, provider market.User, refreshURL, returnURL string) (string, error) {
	acct, err := s.db.FindPayoutAccount(ctx, provider.ID)
	if market.ErrorCode(err) == market.CodeNotFound {
		a, cerr := s.pay.CreateConnectedAccount(ctx, provider.Email, fmt.Sprintf("provider_%d_account", provider.ID))
		if cerr != nil {
			return "", cerr
		}
		acct, err = s.db.CreatePayoutAccount(ctx, provider.ID, a.ID, s.now())
	}
	if err != nil {
		return "", err
	}
	return s.pay.AccountLink(ctx, acct.AccountID, refreshURL, returnURL)
}

// RefreshPayoutAccount reads the provider's connected account from the
// processor (its webhook may come later) and records its state; true when
// onboarding is finished.
func (s *Service) RefreshPayoutAccount(ctx context.Context, providerID int64) (bool, error) {
	acct, err := s.db.FindPayoutAccount(ctx, providerID)
	if err != nil {
		return false, err
	}
	a, err := s.pay.RetrieveAccount(ctx, acct.AccountID)
	if err != nil {
		return false, err
	}
	now := s.now()
	if _, err := s.db.UpdatePayoutAccount(ctx, store.AccountUpdate{AccountID: a.ID, DetailsSubmitted: a.DetailsSubmitted,
		ChargesEnabled: a.ChargesEnabled, PayoutsEnabled: a.PayoutsEnabled, At: now}, now); err != nil {
		return false, err
	}
	return a.Onboarded(), nil
}

// StartCardSetup sends the buyer to the processor's page to save a card (a
// checkout in setup mode), attached to the buyer's customer there.
func (s *Service) StartCardSetup(ctx context.Context, buyer market.User, back CheckoutURLs) (string, error) {
	customer, err := s.db.FindPaymentCustomer(ctx, buyer.ID)
	if err != nil && market.ErrorCode(err) != market.CodeNotFound {
		return "", err
	}
	co, err := s.pay.CreateSetupCheckout(ctx, billing.SetupInput{UserID: buyer.ID, Customer: customer, BuyerEmail: buyer.Email,
		SuccessURL: back.Success, CancelURL: back.Cancel})
	if err != nil {
		return "", err
	}
	s.log.Info("card setup started", "user_id", buyer.ID, "checkout_id", co.ID)
	return co.URL, nil
}

// RemovePaymentMethod removes one of the user's saved cards: it is not
// charged again.
func (s *Service) RemovePaymentMethod(ctx context.Context, userID, methodID int64) error {
	return s.db.RemovePaymentMethod(ctx, userID, methodID, s.now())
}

// The local test processor's own pages (simulated payment, onboarding and
// card pages) need more of it than billing.Processor says.
type (
	localCheckouts interface {
		CheckoutInput(checkoutID string) (billing.CheckoutInput, error)
		CompleteCheckout(checkoutID string, succeed bool, now time.Time) ([]billing.Event, error)
		CompleteOnboarding(accountID string, now time.Time) (billing.Event, error)
	}
	localSetups interface {
		SetupInput(checkoutID string) (billing.SetupInput, error)
		CompleteSetup(checkoutID, cardNumber string) (billing.SavedMethod, error)
	}
)

// SimulatedCheckout is what the local test processor's payment page shows.
type SimulatedCheckout struct {
	ReservationID int64
	TopUpID       int64 // a balance top-up's page (metered.go) instead of a reservation's
	Description   string
	Amount        market.Cents
}

var errNoSimulatedCheckout = market.Errorf(market.CodeNotFound, "This payment page does not exist (start the payment again from the reservation).")

// FindSimulatedCheckout finds a checkout of the local test processor; only
// the reservation's buyer may see or pay it. Not found when payments are
// real.
func (s *Service) FindSimulatedCheckout(ctx context.Context, buyerID int64, checkoutID string) (SimulatedCheckout, error) {
	lp, ok := s.pay.(localCheckouts)
	if !ok {
		return SimulatedCheckout{}, errNoSimulatedCheckout
	}
	in, err := lp.CheckoutInput(checkoutID)
	if err != nil {
		return SimulatedCheckout{}, errNoSimulatedCheckout
	}
	if in.TopUpID > 0 {
		if _, err := s.db.FindTopUp(ctx, buyerID, in.TopUpID); err != nil {
			return SimulatedCheckout{}, err
		}
		return SimulatedCheckout{TopUpID: in.TopUpID, Description: in.Description, Amount: in.Amount}, nil
	}
	if _, err := s.db.FindBuyerReservation(ctx, buyerID, in.ReservationID); err != nil {
		return SimulatedCheckout{}, err
	}
	return SimulatedCheckout{ReservationID: in.ReservationID, Description: in.Description, Amount: in.Amount}, nil
}

// CompleteSimulatedCheckout is the buyer pressing pay (or decline) on the
// local test processor's page; its events are applied as the webhook's
// are. It returns the reservation's payment as it stands afterwards.
func (s *Service) CompleteSimulatedCheckout(ctx context.Context, log *slog.Logger, buyerID int64, checkoutID string, succeed bool) (store.Payment, error) {
	co, err := s.FindSimulatedCheckout(ctx, buyerID, checkoutID)
	if err != nil {
		return store.Payment{}, err
	}
	events, err := s.pay.(localCheckouts).CompleteCheckout(checkoutID, succeed, s.now())
	if err != nil {
		return store.Payment{}, err
	}
	for _, ev := range events {
		if err := s.ApplyEvent(ctx, log, ev); err != nil {
			return store.Payment{}, err
		}
	}
	if co.TopUpID > 0 {
		return store.Payment{}, nil // the top-up is recorded paid by its event (see FindTopUp)
	}
	return s.db.FindPayment(ctx, co.ReservationID)
}

var errNoSimulatedAccount = market.Errorf(market.CodeNotFound, "That payout account could not be found.")

// FindSimulatedPayoutAccount finds the provider's connected account at the
// local test processor, for its onboarding page; not found when payments
// are real or the account is not theirs.
func (s *Service) FindSimulatedPayoutAccount(ctx context.Context, providerID int64, accountID string) (store.PayoutAccount, error) {
	if _, ok := s.pay.(localCheckouts); !ok {
		return store.PayoutAccount{}, errNoSimulatedAccount
	}
	acct, err := s.db.FindPayoutAccount(ctx, providerID)
	if err != nil || acct.AccountID != accountID {
		return store.PayoutAccount{}, errNoSimulatedAccount
	}
	return acct, nil
}

// CompleteSimulatedOnboarding finishes onboarding at the local test
// processor; its account event is applied as the webhook's would be.
func (s *Service) CompleteSimulatedOnboarding(ctx context.Context, log *slog.Logger, providerID int64, accountID string) error {
	acct, err := s.FindSimulatedPayoutAccount(ctx, providerID, accountID)
	if err != nil {
		return err
	}
	ev, err := s.pay.(localCheckouts).CompleteOnboarding(acct.AccountID, s.now())
	if err != nil {
		return err
	}
	return s.ApplyEvent(ctx, log, ev)
}

var errNoSimulatedSetup = market.Errorf(market.CodeNotFound, "This card page does not exist (choose “Add a card” on your account page again).")

// FindSimulatedCardSetup checks that a card setup of the local test
// processor exists and is the user's; not found otherwise.
func (s *Service) FindSimulatedCardSetup(userID int64, checkoutID string) error {
	lp, ok := s.pay.(localSetups)
	if !ok {
		return errNoSimulatedSetup
	}
	if in, err := lp.SetupInput(checkoutID); err != nil || in.UserID != userID {
		return errNoSimulatedSetup
	}
	return nil
}

// CompleteSimulatedCardSetup saves the chosen test card on the local test
// processor (an unknown card number is a market invalid error); the buyer
// then returns as from the processor, through SaveSetupCard.
func (s *Service) CompleteSimulatedCardSetup(userID int64, checkoutID, cardNumber string) error {
	if err := s.FindSimulatedCardSetup(userID, checkoutID); err != nil {
		return err
	}
	_, err := s.pay.(localSetups).CompleteSetup(checkoutID, cardNumber)
	return err
}

// TestCards are the cards the local test processor's card page offers.
func (s *Service) TestCards() []billing.LocalTestCard { return billing.LocalTestCards() }

package workflow

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/billing/stripemock"
)

// stripeBank is Stripe's side of saved-card charges for a test whose
// charges go through the real billing.Stripe to stripe-mock: the request's
// encoding, its idempotency key and the answer's decoding are the real
// ones. stripe-mock is stateless (a confirmed PaymentIntent comes back
// requires_payment_method, with a new id on every call, and no key is
// replayed), so the bank's part is played here: the first charge under a
// key succeeds for its amount, and a repeated key is answered with the
// first call's payment, as Stripe does. Every replica's processor shares
// one bank, as replicas share one Stripe account.
type stripeBank struct {
	api      *billing.Stripe
	mu       sync.Mutex
	byKey    map[string]billing.Payment
	payments map[string]billing.Payment // by id
	requests map[string]int             // charges that reached stripe-mock, by idempotency key
}

func newStripeBank(t *testing.T) *stripeBank {
	t.Helper()
	api, err := billing.NewStripe(billing.StripeConfig{SecretKey: "sk_test_replicas", WebhookSecret: "whsec_replicas",
		APIBase: stripemock.URL(t), HTTPClient: &http.Client{Timeout: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	return &stripeBank{api: api, byKey: map[string]billing.Payment{}, payments: map[string]billing.Payment{}, requests: map[string]int{}}
}

// processor is a replica's processor: its local one for everything but
// the saved cards, which are charged at the bank.
func (b *stripeBank) processor(l billing.Processor) billing.Processor {
	return &stripeCards{Processor: l, bank: b}
}

// charges returns the requests that reached stripe-mock by key, and the
// payments made.
func (b *stripeBank) charges() (map[string]int, []billing.Payment) {
	b.mu.Lock()
	defer b.mu.Unlock()
	reqs := make(map[string]int, len(b.requests))
	for k, n := range b.requests {
		reqs[k] = n
	}
	var pays []billing.Payment
	for _, p := range b.payments {
		pays = append(pays, p)
	}
	return reqs, pays
}

type stripeCards struct {
	billing.Processor
	bank *stripeBank
}

// ChargeSaved charges the saved card through stripe-mock; the bank
// answers as Stripe would (see stripeBank). Calls are one at a time, as
// Stripe serialises the calls under one key.
func (p *stripeCards) ChargeSaved(ctx context.Context, in billing.ChargeInput) (billing.Payment, error) {
	b := p.bank
	b.mu.Lock()
	defer b.mu.Unlock()
	pay, err := b.api.ChargeSaved(ctx, in)
	b.requests[in.IdempotencyKey]++
	if err != nil {
		return billing.Payment{}, err
	}
	if first, ok := b.byKey[in.IdempotencyKey]; ok {
		return first, nil
	}
	if !strings.HasPrefix(pay.ID, "pi_") || pay.Amount != in.Amount {
		return billing.Payment{}, fmt.Errorf("stripe-mock answered %+v to a charge of %s", pay, in.Amount)
	}
	pay.Status, pay.Succeeded, pay.AmountReceived = "succeeded", true, in.Amount
	pay.ChargeID, pay.Metadata = "ch_"+strings.TrimPrefix(pay.ID, "pi_"), in.Metadata
	b.byKey[in.IdempotencyKey], b.payments[pay.ID] = pay, pay
	return pay, nil
}

// RetrievePayment and ListPayments see the bank's payments besides the
// local processor's.
func (p *stripeCards) RetrievePayment(ctx context.Context, id string) (billing.Payment, error) {
	p.bank.mu.Lock()
	pay, ok := p.bank.payments[id]
	p.bank.mu.Unlock()
	if ok {
		return pay, nil
	}
	return p.Processor.RetrievePayment(ctx, id)
}

func (p *stripeCards) ListPayments(ctx context.Context, since time.Time) ([]billing.Payment, error) {
	out, err := p.Processor.ListPayments(ctx, since)
	if err != nil {
		return nil, err
	}
	_, pays := p.bank.charges()
	return append(out, pays...), nil
}

package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"

	"github.com/gpumarket/gpumarket/billing"
)

// paymentFlags are the payment settings shared by serve and reconcile.
type paymentFlags struct {
	secretKey, webhookSecret, apiBase *string
	feeBP                             *int
}

// billingFlags defines the payment flags on fs, defaulting from the environment.
func billingFlags(fs *flag.FlagSet, getenv func(string) string) *paymentFlags {
	fee := 1000
	if v := getenv("GPUMARKET_PLATFORM_FEE_BP"); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			fee = n
		} else {
			fee = -1 // reported by processor()
		}
	}
	return &paymentFlags{
		secretKey:     fs.String("stripe-secret-key", getenv("STRIPE_SECRET_KEY"), "Stripe secret key (env STRIPE_SECRET_KEY); empty means simulated payments with the local test processor"),
		webhookSecret: fs.String("stripe-webhook-secret", getenv("STRIPE_WEBHOOK_SECRET"), "Stripe webhook signing secret, whsec_… (env STRIPE_WEBHOOK_SECRET); required with a key"),
		apiBase:       fs.String("stripe-api-base", getenv("STRIPE_API_BASE"), "Stripe API base URL, e.g. http://127.0.0.1:12111 for stripe-mock (env STRIPE_API_BASE)"),
		feeBP:         fs.Int("platform-fee-bp", fee, "platform fee in basis points of the provider's takings after credits (env GPUMARKET_PLATFORM_FEE_BP)"),
	}
}

// processor builds the configured payment processor: Stripe with a key,
// else the local test processor, which simulates payments and keeps its
// objects in local (the marketplace's database).
func (f *paymentFlags) processor(local billing.LocalStore) (billing.Processor, error) {
	if *f.feeBP < 0 || *f.feeBP > 10000 {
		return nil, errors.New("-platform-fee-bp must be an integer from 0 to 10000")
	}
	if *f.secretKey == "" {
		if *f.webhookSecret != "" || *f.apiBase != "" {
			return nil, errors.New("-stripe-webhook-secret and -stripe-api-base need -stripe-secret-key")
		}
		return billing.NewLocal(billing.LocalConfig{Store: local}), nil
	}
	p, err := billing.NewStripe(billing.StripeConfig{SecretKey: *f.secretKey, WebhookSecret: *f.webhookSecret, APIBase: *f.apiBase})
	if err != nil {
		return nil, fmt.Errorf("stripe: %w", err)
	}
	return p, nil
}

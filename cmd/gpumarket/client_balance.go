package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"slices"

	"github.com/gpumarket/gpumarket/market"
)

// The prepaid balance from the command line (docs/cli.md, docs/metered.md):
//
//	gpumarket balance [--json]
//	gpumarket balance auto-top-up -threshold 15.00 -amount 20.00 [--json]
//	gpumarket balance auto-top-up -off [--json]

// cliAutoTopUp is the API's automatic top-up setting.
type cliAutoTopUp struct {
	On           bool   `json:"on"`
	Threshold    int64  `json:"threshold_cents"`
	Amount       int64  `json:"amount_cents"`
	PausedReason string `json:"paused_reason"`
}

// cliBalance is the API's balance, as far as the client prints it.
type cliBalance struct {
	Balance   int64        `json:"balance_cents"`
	TopUps    int64        `json:"top_ups_cents"`
	Draws     int64        `json:"draws_cents"`
	Refunds   int64        `json:"refunds_cents"`
	AutoTopUp cliAutoTopUp `json:"auto_top_up"`
}

const balanceUsage = "balance [--json] | balance auto-top-up (-threshold DOLLARS -amount DOLLARS | -off) [--json]"

func cmdBalance(c *apiClient, args []string) error {
	if len(args) > 0 && args[0] == "auto-top-up" {
		return c.setAutoTopUp(args[1:])
	}
	fs := flag.NewFlagSet("balance", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the API's JSON")
	if _, err := parseFlags(fs, args, balanceUsage, 0, 0); err != nil {
		return err
	}
	return c.showBalance(*asJSON)
}

// showBalance prints GET /balance: the figures and the automatic top-up.
func (c *apiClient) showBalance(asJSON bool) error {
	var b cliBalance
	data, err := c.do(http.MethodGet, "/balance", nil, &b)
	if err != nil {
		return err
	}
	if asJSON {
		return c.printJSON(data)
	}
	fmt.Fprintf(c.stdout, "Balance %s (top-ups %s − draws %s − refunds %s)\n", money(b.Balance), money(b.TopUps), money(b.Draws), money(b.Refunds))
	fmt.Fprintln(c.stdout, b.AutoTopUp.line())
	return nil
}

// line says the setting in one sentence.
func (a cliAutoTopUp) line() string {
	if !a.On {
		return "Automatic top-up: off (gpumarket balance auto-top-up -threshold DOLLARS -amount DOLLARS)"
	}
	s := fmt.Sprintf("Automatic top-up: below %s, top up by %s from the saved card", money(a.Threshold), money(a.Amount))
	if a.PausedReason != "" {
		s += fmt.Sprintf(" — paused: %s (set it again or top up by hand to resume)", a.PausedReason)
	}
	return s
}

// setAutoTopUp sends PUT /balance/auto-top-up: a threshold and an amount
// in dollars, or -off (both zero). The server checks the range and the
// saved card; its field messages are printed by failure.
func (c *apiClient) setAutoTopUp(args []string) error {
	const usage = "balance auto-top-up (-threshold DOLLARS -amount DOLLARS | -off) [--json]"
	fs := flag.NewFlagSet("balance auto-top-up", flag.ContinueOnError)
	rawThreshold := fs.String("threshold", "", "top up when the balance is below this, in dollars (e.g. 15.00)")
	rawAmount := fs.String("amount", "", "top up by this, in dollars (e.g. 20.00)")
	off := fs.Bool("off", false, "turn the automatic top-up off")
	asJSON := fs.Bool("json", false, "print the API's JSON")
	if _, err := parseFlags(fs, args, usage, 0, 0); err != nil {
		return err
	}
	var body struct {
		Threshold market.Cents `json:"threshold_cents"`
		Amount    market.Cents `json:"amount_cents"`
	}
	switch {
	case *off && (*rawThreshold != "" || *rawAmount != ""):
		return usageErr("-off takes no -threshold or -amount\nusage: gpumarket %s", usage)
	case *off:
	case *rawThreshold == "" || *rawAmount == "":
		return usageErr("give both -threshold and -amount, or -off\nusage: gpumarket %s", usage)
	default:
		var err error
		if body.Threshold, err = market.ParseCents(*rawThreshold); err != nil {
			return usageErr("-threshold %q: %v", *rawThreshold, err)
		}
		if body.Amount, err = market.ParseCents(*rawAmount); err != nil {
			return usageErr("-amount %q: %v", *rawAmount, err)
		}
		if body.Threshold == 0 && body.Amount == 0 {
			return usageErr("a zero threshold and amount turn it off: say -off")
		}
	}
	var a cliAutoTopUp
	data, err := c.do(http.MethodPut, "/balance/auto-top-up", body, &a)
	if err != nil {
		return byFlag(err, data, "the automatic top-up was not set", "threshold", "amount")
	}
	if *asJSON {
		return c.printJSON(data)
	}
	fmt.Fprintln(c.stdout, a.line())
	return nil
}

// byFlag rewrites a refusal that names fields (the API's 400 with
// per-field messages) as one line per flag, in the order given, without the
// page's "correct the highlighted fields": on a terminal nothing is
// highlighted. Any other error is returned as it is.
func byFlag(err error, data []byte, what string, flags ...string) error {
	var f apiFailure
	if json.Unmarshal(data, &f) != nil || len(f.Error.Fields) == 0 {
		return err
	}
	msg := what + ":"
	for _, name := range flags {
		if m, ok := f.Error.Fields[name]; ok {
			msg += fmt.Sprintf("\n  -%s: %s", name, m)
		}
	}
	for _, name := range sortedKeys(f.Error.Fields) {
		if !slices.Contains(flags, name) {
			msg += fmt.Sprintf("\n  %s: %s", name, f.Error.Fields[name])
		}
	}
	return &exitError{code: exitRefused, msg: msg}
}

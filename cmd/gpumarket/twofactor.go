package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gpumarket/gpumarket/account"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// adminReset2FA turns off the two-factor sign-in of an account whose owner
// lost their authenticator and recovery codes, after the operator has
// checked who is asking: the reset ends the account's sessions, is
// recorded in the audit trail with the note, and the owner is mailed.
func adminReset2FA(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("admin reset-2fa", flag.ContinueOnError)
	dbPath := fs.String("db", envOr(getenv, "GPUMARKET_DB", "./data/gpumarket.db"), "SQLite database path, or a postgres:// URL (env GPUMARKET_DB)")
	email := fs.String("email", "", "the account's email address")
	note := fs.String("note", "", "why, for the audit trail (e.g. the support ticket and how identity was checked)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if strings.TrimSpace(*email) == "" {
		return errors.New("admin reset-2fa: -email is required")
	}
	if msg := market.TextProblem(*note, false); msg != "" {
		return fmt.Errorf("admin reset-2fa: -note: %s", msg)
	}
	db, err := store.Open(ctx, *dbPath)
	if err != nil {
		return err
	}
	defer db.Close()
	u, err := db.ResetTwoFactor(ctx, *email, strings.TrimSpace(*note), time.Now().UTC())
	if err != nil {
		return fmt.Errorf("admin reset-2fa %s: %s", *email, market.ErrorMessage(err))
	}
	fmt.Fprintf(stdout, "two-factor sign-in of %s (id %d) reset: its sessions ended, the owner mailed, the audit trail updated; "+
		"they sign in with their password and set it up again\n", u.Email, u.ID)
	return nil
}

// demoTwoFactor turns on two-factor sign-in for the demo admin (admin
// pages require it) with a new secret, once, and keeps the secret with the
// demo credentials so every start prints it.
func demoTwoFactor(ctx context.Context, db *store.DB, sessionKey []byte, creds []demoCredential, now time.Time) ([]demoCredential, error) {
	changed := false
	for i, c := range creds {
		if c.Role != "admin" || c.TOTPSecret != "" {
			continue
		}
		u, _, err := db.FindUserByEmail(ctx, c.Email)
		if err != nil {
			return nil, fmt.Errorf("demo admin: %w", err)
		}
		secret, err := account.NewSecret(c.Email)
		if err != nil {
			return nil, err
		}
		sealed, err := account.SealSecret(sessionKey, u.ID, secret)
		if err != nil {
			return nil, err
		}
		// Recovery codes are made as for anyone, and not kept: the demo
		// admin's secret is printed at every start instead.
		codes, err := account.NewRecoveryCodes()
		if err != nil {
			return nil, err
		}
		if err := db.BeginTOTP(ctx, u.ID, sealed, now); err != nil {
			return nil, fmt.Errorf("demo admin two-factor: %w", err)
		}
		if err := db.EnableTOTP(ctx, u.ID, market.TOTPStep(now)-market.TOTPSkew-1, account.HashRecoveryCodes(u.ID, codes), now); err != nil {
			return nil, fmt.Errorf("demo admin two-factor: %w", err)
		}
		creds[i].TOTPSecret, changed = secret, true
	}
	if !changed {
		return creds, nil
	}
	b, err := json.Marshal(creds)
	if err != nil {
		return nil, err
	}
	return creds, db.SetSetting(ctx, demoSettingKey, string(b))
}

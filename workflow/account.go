package workflow

import (
	"context"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/account"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// Accounts: signing up, logging in and out (with the second factor),
// passwords, two-factor sign-in, API tokens, SSH keys, address
// verification and changes. The rules and the cryptography are
// account's (and market's), the state store's; each step's throttles
// are counted here, before it is tried. A throttled step is a market
// CodeRateLimited error with a message saying how long to wait; input
// that does not do is CodeInvalid with a message per field.

// Messages of refused attempts.
const (
	msgWrongCode      = "That code does not match. Enter the code your app shows now (check that your phone's clock is right)."
	msgUsedCode       = "That code has already been used. Wait for the next code in your app and enter it."
	msgWrongPassword  = "That is not your current password."
	msgLoginMismatch  = "That email and password do not match an account."
	msgLoginSuspended = "This account is suspended. Contact support if you think this is a mistake."
	msgTwoFactorGone  = "Two-factor sign-in is no longer on for this account. Log in again."
	msgWrongProof     = "That is neither a current code from your app nor your password."
)

// throttled is the error of an attempt refused by a throttle of the
// client network.
func throttled(wait time.Duration) error {
	return market.Errorf(market.CodeRateLimited, "Too many attempts from here. Please wait %s and try again.", account.WaitText(wait))
}

func fieldProblem(field, msg string) error {
	return &market.Error{Code: market.CodeInvalid, Message: msg, Fields: map[string]string{field: msg}}
}

// hit counts an attempt under key and refuses it, with a message from
// refused, when limit attempts were made within window.
func (s *Service) hit(ctx context.Context, key string, window time.Duration, limit int, refused func(time.Duration) error) error {
	ok, wait, err := s.db.ThrottleHit(ctx, key, s.now(), window, limit)
	if err != nil {
		return err
	}
	if !ok {
		return refused(wait)
	}
	return nil
}

// SignUp creates an account, or, when the address has one, mails its
// owner instead; the caller answers alike either way. su is validated
// (market.ValidateSignUp), which normalises it in place; network is the
// client's (account.ClientNetwork), whose sign-ups are throttled first.
func (s *Service) SignUp(ctx context.Context, su *market.SignUp, network string) (id int64, existed bool, err error) {
	if err := s.hit(ctx, "signup-ip:"+network, account.SignUpWindow, account.SignUpPerNetwork, throttled); err != nil {
		return 0, false, err
	}
	if err := market.ValidateSignUp(su); err != nil {
		return 0, false, err
	}
	hash, err := s.passwords.Hash(su.Password)
	if err != nil {
		return 0, false, err
	}
	return s.db.SignUp(ctx, market.User{Email: su.Email, DisplayName: su.DisplayName, Organisation: su.Organisation,
		IsBuyer: su.IsBuyer, IsProvider: su.IsProvider}, hash, s.now())
}

// LogIn is a log-in with a password.
type LogIn struct {
	Email    string // normalised (market.NormaliseEmail)
	Password string
	Next     string // where to go after the second factor, if one is asked
	Network  string // the client's (account.ClientNetwork)
	// KnownDevice is set when the browser has logged in to the account
	// before: it is exempt from the account's daily failure limit.
	KnownDevice bool
	// OldSession is the id of the session the browser had, if any; it
	// ends when the new one starts.
	OldSession string
}

// LoggedIn is the outcome of a log-in that was not refused.
type LoggedIn struct {
	User market.User
	// Session is the new session, or zero when Challenge is set.
	Session store.Session
	// Challenge is the raw id of the half-done login when the account has
	// two-factor sign-in on: the password alone grants nothing, and the
	// code completes it (LogInWithCode).
	Challenge string
	// Next is where the person asked to go (from the half-done login).
	Next string
	// Recovery is set when a recovery code was spent; RecoveryLeft is how
	// many are left.
	Recovery     bool
	RecoveryLeft int
}

// LogIn checks a password log-in against the throttles and the account.
// Only failures count: against the client network (so that an office or
// a lab behind one address is not locked out by its own successful
// log-ins), against the account from this network, and against the
// account from all of them. It is CodeRateLimited when a throttle
// refuses, CodeInvalid when the email or password is empty,
// CodeUnauthorized when they do not match an account and CodeForbidden
// when the account is suspended.
func (s *Service) LogIn(ctx context.Context, l LogIn) (LoggedIn, error) {
	now := s.now()
	ipKey := "login-ip:" + l.Network
	pairKey, acctKey := "login-pair:"+l.Email+" "+l.Network, "login-acct:"+l.Email
	peeks := []struct {
		key    string
		window time.Duration
		limit  int
	}{{ipKey, account.LoginWindow, account.LoginPerNetwork}, {pairKey, account.LoginWindow, account.LoginPerPair},
		{pairKey, account.LoginDay, account.LoginPerPairDay}}
	for _, p := range peeks {
		if blocked, wait, err := s.db.ThrottlePeek(ctx, p.key, now, p.window, p.limit); err != nil {
			return LoggedIn{}, err
		} else if blocked {
			return LoggedIn{}, throttled(wait)
		}
	}
	if !l.KnownDevice {
		if blocked, wait, err := s.db.ThrottlePeek(ctx, acctKey, now, account.LoginDay, account.LoginPerAccount); err != nil {
			return LoggedIn{}, err
		} else if blocked {
			return LoggedIn{}, market.Errorf(market.CodeRateLimited, "This account has had too many failed log-ins today. "+
				"Log in from a browser you have logged in with before, or wait %s and try again.", account.WaitText(wait))
		}
	}
	if l.Email == "" || l.Password == "" {
		return LoggedIn{}, market.Errorf(market.CodeInvalid, "Enter your email and password.")
	}
	u, hash, err := s.db.FindUserByEmail(ctx, l.Email)
	if err != nil && market.ErrorCode(err) != market.CodeNotFound {
		return LoggedIn{}, err
	}
	if err != nil {
		hash = nil // compared against the dummy hash: an unknown email takes as long as a wrong password
	}
	if !s.passwords.Check(hash, l.Password) {
		// The pair's rows are kept for the day; its short window is a peek.
		for _, h := range []struct {
			key    string
			window time.Duration
			limit  int
		}{{pairKey, account.LoginDay, account.LoginPerPairDay}, {acctKey, account.LoginDay, account.LoginPerAccount},
			{ipKey, account.LoginWindow, account.LoginPerNetwork}} {
			if _, _, err := s.db.ThrottleHit(ctx, h.key, now, h.window, h.limit); err != nil {
				return LoggedIn{}, err
			}
		}
		return LoggedIn{}, market.Errorf(market.CodeUnauthorized, msgLoginMismatch)
	}
	if u.Suspended {
		return LoggedIn{}, market.Errorf(market.CodeForbidden, msgLoginSuspended)
	}
	if err := s.db.ThrottleReset(ctx, pairKey); err != nil {
		return LoggedIn{}, err
	}
	tf, err := s.db.FindTwoFactor(ctx, u.ID)
	if err != nil {
		return LoggedIn{}, err
	}
	if tf.Enabled() {
		id, err := s.db.CreateLoginChallenge(ctx, u.ID, l.Next, now)
		return LoggedIn{User: u, Challenge: id, Next: l.Next}, err
	}
	sess, err := s.StartSession(ctx, u.ID, l.OldSession)
	return LoggedIn{User: u, Session: sess, Next: l.Next}, err
}

// CodeLogIn completes a half-done login with its second factor.
type CodeLogIn struct {
	Challenge  string // the raw id LogIn returned
	Code       string // as typed: a TOTP code or a recovery code
	Network    string // the client's (account.ClientNetwork)
	OldSession string // as in LogIn
}

// LogInWithCode completes the half-done login with a TOTP code or a
// recovery code, and starts the session. It is CodeNotFound when the
// half-done login is gone (expired, completed), CodeRateLimited when a
// throttle refuses, CodeInvalid (field "code") when the code is not one,
// and CodeUnauthorized when it does not work.
func (s *Service) LogInWithCode(ctx context.Context, l CodeLogIn) (LoggedIn, error) {
	lc, err := s.db.FindLoginChallenge(ctx, l.Challenge, s.now())
	if err != nil {
		return LoggedIn{}, err
	}
	if err := s.codeThrottle(ctx, lc.UserID, l.Network); err != nil {
		return LoggedIn{}, err
	}
	f, err := market.ParseSecondFactor(l.Code)
	if err != nil {
		return LoggedIn{}, err
	}
	tf, err := s.db.FindTwoFactor(ctx, lc.UserID)
	if err != nil {
		return LoggedIn{}, err
	}
	out := LoggedIn{Next: lc.Next, Recovery: f.Recovery != ""}
	switch {
	case !tf.Enabled():
		// Turned off (or reset) since the password was accepted.
		return LoggedIn{}, market.Errorf(market.CodeUnauthorized, msgTwoFactorGone)
	case out.Recovery:
		if out.RecoveryLeft, err = s.db.UseRecoveryCode(ctx, lc.UserID, account.HashRecoveryCode(lc.UserID, f.Recovery), s.now()); err != nil {
			return LoggedIn{}, err
		}
	default:
		if msg, err := s.useTOTP(ctx, tf, f.Code); err != nil {
			return LoggedIn{}, err
		} else if msg != "" {
			return LoggedIn{}, market.Errorf(market.CodeUnauthorized, "%s", msg)
		}
	}
	if err := s.db.DeleteLoginChallenge(ctx, l.Challenge); err != nil {
		return LoggedIn{}, err
	}
	if err := s.db.ResetCodeAttempts(ctx, lc.UserID); err != nil {
		return LoggedIn{}, err
	}
	if out.User, err = s.db.FindUserByID(ctx, lc.UserID); err != nil {
		return LoggedIn{}, err
	}
	out.Session, err = s.StartSession(ctx, out.User.ID, l.OldSession)
	return out, err
}

// StartSession logs the user in with a fresh session (its id rotated at
// every log-in) lasting account.SessionTTL, and ends old, the session the
// browser had before, if any.
func (s *Service) StartSession(ctx context.Context, userID int64, old string) (store.Session, error) {
	if old != "" {
		_ = s.db.DeleteSession(ctx, old) // the new session does not depend on it
	}
	return s.db.CreateSession(ctx, userID, s.now(), account.SessionTTL)
}

// LogOut ends the session with the id.
func (s *Service) LogOut(ctx context.Context, sessionID string) error {
	return s.db.DeleteSession(ctx, sessionID)
}

// codeThrottle counts an attempt at a second factor: against the client
// network, and against the account, counted before the code is checked
// in one conditional UPDATE (store.TakeCodeAttempt), so simultaneous
// codes cannot race past the limit.
func (s *Service) codeThrottle(ctx context.Context, userID int64, network string) error {
	if err := s.hit(ctx, "2fa-ip:"+network, account.LoginWindow, account.LoginPerNetwork, throttled); err != nil {
		return err
	}
	ok, wait, err := s.db.TakeCodeAttempt(ctx, userID, s.now(), account.LoginWindow, account.CodeAttemptsPerAccount)
	if err != nil {
		return err
	}
	if !ok {
		return market.Errorf(market.CodeRateLimited, "Too many wrong codes for this account. Please wait %s and try again.", account.WaitText(wait))
	}
	return nil
}

// useTOTP checks a TOTP code for the account's two-factor sign-in and,
// when it matches, records its step as used (atomically, so it works
// once). A code that does not work gives a message for the person.
func (s *Service) useTOTP(ctx context.Context, tf store.TwoFactor, code string) (msg string, err error) {
	secret, err := s.TwoFactorSecret(tf)
	if err != nil {
		return "", err
	}
	step, ok, used := account.MatchCode(secret, code, s.codeNow(), tf.LastStep)
	switch {
	case used:
		return msgUsedCode, nil
	case !ok:
		return msgWrongCode, nil
	}
	if err := s.db.UseTOTPStep(ctx, tf.UserID, step); market.ErrorCode(err) == market.CodeUnauthorized {
		return msgUsedCode, nil
	} else if err != nil {
		return "", err
	}
	return "", nil
}

// TwoFactorSecret opens the account's sealed TOTP secret (to show while
// it is being set up).
func (s *Service) TwoFactorSecret(tf store.TwoFactor) (string, error) {
	return account.OpenSecret(s.sessionKey, tf.UserID, tf.Secret)
}

// BeginTwoFactor starts setting up two-factor sign-in for the user with a
// new secret, replacing a setup in progress. It is a conflict when it is
// already on.
func (s *Service) BeginTwoFactor(ctx context.Context, u market.User) error {
	secret, err := account.NewSecret(u.Email)
	if err != nil {
		return err
	}
	sealed, err := account.SealSecret(s.sessionKey, u.ID, secret)
	if err != nil {
		return err
	}
	return s.db.BeginTOTP(ctx, u.ID, sealed, s.now())
}

// EnableTwoFactor turns on the two-factor sign-in being set up once the
// person enters a current code from its secret, and returns the new
// recovery codes (formatted for reading; they exist only here, the
// database keeps their hashes). It is CodeRateLimited when a throttle
// refuses, CodeInvalid (field "code") when the code is not one or does
// not match, and a conflict when no setup is in progress.
func (s *Service) EnableTwoFactor(ctx context.Context, userID int64, input, network string) ([]string, error) {
	tf, err := s.db.FindTwoFactor(ctx, userID)
	if err != nil {
		return nil, err
	}
	if !tf.Pending() {
		return nil, market.Errorf(market.CodeConflict, "Setup has expired or was replaced. Start setting up two-factor sign-in again.")
	}
	if err := s.codeThrottle(ctx, userID, network); err != nil {
		return nil, err
	}
	code, err := market.ParseTOTPCode(input)
	if err != nil {
		return nil, err
	}
	secret, err := s.TwoFactorSecret(tf)
	if err != nil {
		return nil, err
	}
	step, ok, _ := account.MatchCode(secret, code, s.codeNow(), tf.LastStep)
	if !ok {
		return nil, fieldProblem("code", msgWrongCode)
	}
	codes, err := account.NewRecoveryCodes()
	if err != nil {
		return nil, err
	}
	if err := s.db.EnableTOTP(ctx, userID, step, account.HashRecoveryCodes(userID, codes), s.now()); err != nil {
		return nil, err
	}
	for i, c := range codes {
		codes[i] = market.FormatRecoveryCode(c)
	}
	return codes, nil
}

// DisableTwoFactor turns the user's two-factor sign-in off when proof is
// a current code or their password. It is CodeRateLimited when a throttle
// refuses, CodeInvalid (field "proof") when the proof does not work, and
// a conflict when it is not on.
func (s *Service) DisableTwoFactor(ctx context.Context, u market.User, proof, network string) error {
	tf, err := s.db.FindTwoFactor(ctx, u.ID)
	if err != nil {
		return err
	}
	if !tf.Enabled() {
		return market.Errorf(market.CodeConflict, "Two-factor sign-in is not on for this account.")
	}
	if err := s.codeThrottle(ctx, u.ID, network); err != nil {
		return err
	}
	var msg string
	if code, err := market.ParseTOTPCode(proof); err == nil {
		if msg, err = s.useTOTP(ctx, tf, code); err != nil {
			return err
		}
	} else if ok, err := s.checkPassword(ctx, u, proof); err != nil {
		return err
	} else if !ok {
		msg = msgWrongProof
	}
	if msg != "" {
		return fieldProblem("proof", msg)
	}
	return s.db.DisableTOTP(ctx, u.ID, s.now())
}

// checkPassword reports whether pw is the user's current password.
func (s *Service) checkPassword(ctx context.Context, u market.User, pw string) (bool, error) {
	_, hash, err := s.db.FindUserByEmail(ctx, u.Email)
	if err != nil {
		return false, err
	}
	return s.passwords.Check(hash, pw), nil
}

// ChangePassword sets the user's new password when current is their
// password, logs out their other sessions (all but keepSession) and, when
// asked, revokes their API tokens, returning how many. It is CodeInvalid
// (field current_password or new_password) when current is wrong or next
// will not do.
func (s *Service) ChangePassword(ctx context.Context, u market.User, current, next, keepSession string, revokeTokens bool) (int, error) {
	if ok, err := s.checkPassword(ctx, u, current); err != nil {
		return 0, err
	} else if !ok {
		return 0, fieldProblem("current_password", msgWrongPassword)
	}
	if msg := market.PasswordProblem(next); msg != "" {
		return 0, fieldProblem("new_password", msg)
	}
	hash, err := s.passwords.Hash(next)
	if err != nil {
		return 0, err
	}
	return s.db.UpdatePassword(ctx, u.ID, hash, keepSession, revokeTokens, s.now())
}

// RequestPasswordReset mails a reset link to the address (normalised) if
// it has an account, and does the same work either way. It is
// CodeRateLimited when too many links were asked from the client network
// or for the address, and CodeInvalid when it is no address.
func (s *Service) RequestPasswordReset(ctx context.Context, email, network string) error {
	if err := s.hit(ctx, "reset-ip:"+network, account.RecoveryWindow, account.ResetPerNetwork, throttled); err != nil {
		return err
	}
	if msg := market.EmailProblem(email); msg != "" {
		return fieldProblem("email", msg)
	}
	if err := s.hit(ctx, "reset-addr:"+email, account.RecoveryWindow, account.ResetPerAddress, func(wait time.Duration) error {
		return market.Errorf(market.CodeRateLimited, "Several links were asked for this address already. "+
			"Please wait %s and try again, and look in your spam folder.", account.WaitText(wait))
	}); err != nil {
		return err
	}
	return s.db.RequestPasswordReset(ctx, email, s.now())
}

// ResetPassword sets a new password from the reset link's token, which
// logs the account out everywhere (store.ResetPassword), and forgets its
// failed log-ins: its owner has just shown they hold its mailbox. It is
// CodeRateLimited when too many were set from the client network,
// CodeInvalid (field new_password) when the password will not do, and
// the link's problem (not found, conflict) when it does not work.
func (s *Service) ResetPassword(ctx context.Context, token, pw, network string) (market.User, store.AccountCleanup, error) {
	if err := s.hit(ctx, "reset-use-ip:"+network, account.RecoveryWindow, account.ResetUsePerNetwork, throttled); err != nil {
		return market.User{}, store.AccountCleanup{}, err
	}
	if msg := market.PasswordProblem(pw); msg != "" {
		return market.User{}, store.AccountCleanup{}, fieldProblem("new_password", msg)
	}
	hash, err := s.passwords.Hash(pw)
	if err != nil {
		return market.User{}, store.AccountCleanup{}, err
	}
	u, cleanup, err := s.db.ResetPassword(ctx, token, hash, s.now())
	if err != nil {
		return market.User{}, store.AccountCleanup{}, err
	}
	return u, cleanup, s.db.ThrottleReset(ctx, "login-acct:"+u.Email)
}

// ResendVerification mails the user a new link to confirm their address.
// It is CodeRateLimited when it was mailed too often, and a conflict
// (whose message says so) when the address is confirmed already.
func (s *Service) ResendVerification(ctx context.Context, userID int64) error {
	if err := s.hit(ctx, fmt.Sprintf("verify-resend:%d", userID), account.RecoveryWindow, account.ResendPerUser, func(wait time.Duration) error {
		return market.Errorf(market.CodeRateLimited, "We have sent the link several times already. "+
			"Please wait %s before asking again, and look in your spam folder.", account.WaitText(wait))
	}); err != nil {
		return err
	}
	return s.db.ResendVerification(ctx, userID, s.now())
}

// VerifyAddress confirms an address from the token of the link mailed to
// it, keeping the session keepSession (store.VerifyAddress).
func (s *Service) VerifyAddress(ctx context.Context, token, keepSession string) (market.User, store.AccountCleanup, error) {
	return s.db.VerifyAddress(ctx, token, keepSession, s.now())
}

// RequestAddressChange asks, with the current password, to change the
// user's address to newEmail (normalised); the new address confirms it by
// its link. It is CodeRateLimited (field new_email) when asked too often
// and CodeInvalid (field email_password, or new_email) when the password
// is wrong or the address will not do.
func (s *Service) RequestAddressChange(ctx context.Context, u market.User, newEmail, password string) error {
	if err := s.hit(ctx, fmt.Sprintf("address-change:%d", u.ID), account.RecoveryWindow, account.AddressChangePerUser, throttled); err != nil {
		return err
	}
	if ok, err := s.checkPassword(ctx, u, password); err != nil {
		return err
	} else if !ok {
		return fieldProblem("email_password", msgWrongPassword)
	}
	return s.db.RequestAddressChange(ctx, u.ID, newEmail, s.now())
}

// ConfirmAddressChange changes the address from the token of the link
// mailed to the new one, keeping the session keepSession.
func (s *Service) ConfirmAddressChange(ctx context.Context, token, keepSession string) (market.User, error) {
	u, _, err := s.db.ConfirmAddressChange(ctx, token, keepSession, s.now())
	return u, err
}

// CreateAPIToken creates an API token for the user and returns it with
// its raw value, which exists only here (the database keeps its hash).
func (s *Service) CreateAPIToken(ctx context.Context, userID int64, name, scope string) (store.APIToken, string, error) {
	return s.db.CreateAPIToken(ctx, userID, name, scope, s.now())
}

// RevokeAPIToken revokes the user's token with the id; it stops working
// at once.
func (s *Service) RevokeAPIToken(ctx context.Context, userID, id int64) error {
	return s.db.RevokeAPIToken(ctx, userID, id, s.now())
}

// AddSSHKey adds a public key (parsed and checked by the caller) to the
// user's keys, sent to the machines they rent from now on.
func (s *Service) AddSSHKey(ctx context.Context, userID int64, k market.SSHKey) (market.SSHKey, error) {
	added, err := s.db.AddSSHKey(ctx, userID, k, s.now())
	s.agent.cache.dropAssignments() // the agents of the user's rentals are sent the keys
	return added, err
}

// RemoveSSHKey removes the user's key with the id.
func (s *Service) RemoveSSHKey(ctx context.Context, userID, keyID int64) error {
	err := s.db.RemoveSSHKey(ctx, userID, keyID)
	s.agent.cache.dropAssignments()
	return err
}

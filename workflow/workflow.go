// Package workflow is the one door for changes: every change of the
// marketplace's state goes through it. The rule: web reads through store
// and changes anything only through workflow, and holds no payment
// processor (web's TestWebChangesOnlyThroughWorkflow fails otherwise); cmd
// and the background loop call the same methods.
//
// It is the home of the multi-step operations: quoting and booking (with
// the matcher index kept in step), checkout, saved cards and payout
// onboarding, applying the payment processor's events, settling
// reservations and retrying their money movements, refunding late and
// mismatched payments, the exchange (standing orders, spot clearings,
// resale), offers and their moderation, suspension and reinstatement,
// incidents and disputes, reconciling the ledger with the processor, and
// the periodic work (hold expiry, lifecycle, clean-up). It decides nothing
// itself — the rules are in market, the state in store, the money moves
// through billing.
package workflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumarket/gpumarket/account"
	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/mail"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/metrics"
	"github.com/gpumarket/gpumarket/store"
)

// Timings and limits of the money workflow, kept together.
const (
	// IncidentAckDeadline is how long a provider has to acknowledge a
	// buyer's incident report before it becomes a dispute for admins.
	IncidentAckDeadline = 72 * time.Hour
	// SettlementMaxAttempts bounds the retrier; after that a settlement is
	// failed and waits for an admin.
	SettlementMaxAttempts = 8
	// retryBase and retryMax shape the retrier's exponential backoff.
	retryBase = 30 * time.Second
	retryMax  = time.Hour
	// indexReloadEvery bounds how stale the index can be for changes made
	// by another replica.
	indexReloadEvery = 5 * time.Minute
	// pruneEvery is how often expired sessions and old throttle records are
	// deleted; throttleKeep is how long throttle records are kept.
	pruneEvery   = time.Hour
	throttleKeep = 24 * time.Hour
)

// Config is what the process owner hands the workflow.
type Config struct {
	// Billing is the payment processor; nil means the local test processor
	// over the same database (simulated payments, no money moves).
	Billing billing.Processor
	// PlatformFeeBP is the platform's fee in basis points of what a
	// provider keeps after credits.
	PlatformFeeBP int
	// Now returns the current time; nil means time.Now in UTC.
	Now func() time.Time
	// CodeNow is the clock authenticator codes are checked against; nil
	// means Now. A demo whose Now is shifted (-clock-offset) passes the
	// real time: the person's authenticator app counts real time.
	CodeNow func() time.Time
	// Metrics counts settlement steps and failures; nil counts nothing.
	Metrics *metrics.Metrics
	// Replica names this process among the replicas sharing the database
	// (in the background lease's holder); empty means "replica".
	Replica string
	// Mail sends the outbox's messages (mailTick); nil means no SMTP
	// server: mail stays in the outbox, readable on the mailbox pages.
	Mail *mail.Sender
	// BaseURL is the server's public address, for links in mail.
	BaseURL string
	// QuoteBudget bounds the work of each match (quotes, bookings,
	// standing orders); zero means market.DefaultBudget.
	QuoteBudget market.Budget
	// BroadSlots is how many broad matches run at once; 0 means half the
	// processors (at least one).
	BroadSlots int
	// WriteEveryHeartbeat writes every heartbeat in full instead of
	// absorbing repeats (RecordHeartbeat): only to measure what absorbing
	// saves (loadgen -fleet -write-every-heartbeat).
	WriteEveryHeartbeat bool
	// SessionKey is the process's secret (the one that signs the session
	// cookies); the key that seals two-factor secrets is derived from it
	// (account.SealSecret). Without it two-factor sign-in cannot be set
	// up or used.
	SessionKey []byte
	// PasswordCost is the bcrypt cost of new password hashes; 0 means
	// account.DefaultCost. Tests lower it to keep the suite fast.
	PasswordCost int
}

// Service runs the workflows over one database and one processor. It is
// safe for concurrent use.
type Service struct {
	db    *store.DB
	pay   billing.Processor
	log   *slog.Logger
	feeBP int
	now   func() time.Time
	// codeNow is the clock authenticator codes are checked against
	// (Config.CodeNow).
	codeNow func() time.Time

	// idx is the matcher's in-memory index, rebuilt from the database at
	// start and periodically, and kept in step with every offer change the
	// store commits (heardCommit; other replicas' through Follow). It
	// only speeds up search: the store re-checks capacity inside the booking
	// transaction, so a stale index can cost a retry, never a double booking.
	idx    atomic.Pointer[market.Index]
	scores atomic.Pointer[map[int64]market.Reliability]
	// loadedAt is when idx was last loaded in full, in Unix nanoseconds
	// of the service's clock (IndexAge).
	loadedAt atomic.Int64
	// follow orders the index's re-reads of single offers (followOffer);
	// while reloads > 0 a full reload is reading the database, and the
	// offers re-read meanwhile are kept in replay to be read again after it.
	follow  sync.Mutex
	reloads int
	replay  []int64
	// feed coalesces the committed changes heardCommit and Follow apply,
	// and measures the lag of the replicas' feed (FeedLag); applying lets
	// one batch of it be applied at a time (applyPending).
	feed     *feedQueue
	applying sync.Mutex

	// holder is this process's name on the background lease; lease the
	// lease as of its last renewal, nil when this replica does not hold it.
	holder string
	lease  atomic.Pointer[store.Lease]

	metrics *metrics.Metrics

	mail    *mail.Sender
	compose mail.Composer

	// orders queues the offers changed since the standing orders were
	// last matched (orders.go).
	orders *orderQueue

	// budget bounds each match; broad shares the matcher fairly between
	// broad requests; carbon keeps what quotes need for emissions
	// (quote.go).
	budget market.Budget
	broad  *fairShare
	carbon *carbonCache

	// agent holds the agents' long-polls and absorbed heartbeats (agent.go).
	agent *agentState
	// tokenUses are the API tokens' uses not yet written (tokenuse.go).
	tokenUses tokenUses
	// passwords hashes and checks passwords; sessionKey seals two-factor
	// secrets (account.go).
	passwords  *account.Passwords
	sessionKey []byte
}

// New builds the service and loads the matcher index from the database.
func New(ctx context.Context, cfg Config, db *store.DB, log *slog.Logger) (*Service, error) {
	if cfg.PlatformFeeBP < 0 || cfg.PlatformFeeBP > 10000 {
		return nil, errors.New("workflow: platform fee must be between 0 and 10000 basis points")
	}
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return time.Now().UTC() }
	}
	if cfg.CodeNow == nil {
		cfg.CodeNow = cfg.Now
	}
	if cfg.Billing == nil {
		cfg.Billing = billing.NewLocal(billing.LocalConfig{Store: db})
	}
	if cfg.Replica == "" {
		cfg.Replica = "replica"
	}
	s := &Service{db: db, pay: cfg.Billing, log: log, feeBP: cfg.PlatformFeeBP, now: func() time.Time { return cfg.Now().UTC() },
		codeNow: func() time.Time { return cfg.CodeNow().UTC() },
		metrics: cfg.Metrics, holder: fmt.Sprintf("%s/%d/%08x", cfg.Replica, os.Getpid(), rand.Uint32()),
		mail: cfg.Mail, compose: mail.Composer{BaseURL: cfg.BaseURL}, orders: newOrderQueue(), feed: newFeedQueue(),
		budget: cfg.QuoteBudget, broad: newFairShare(cfg.BroadSlots), carbon: newCarbonCache(), agent: newAgentState(cfg.WriteEveryHeartbeat)}
	if s.budget == (market.Budget{}) {
		s.budget = market.DefaultBudget
	}
	var err error
	if s.passwords, err = account.NewPasswords(cfg.PasswordCost); err != nil {
		return nil, err
	}
	s.sessionKey = cfg.SessionKey
	// Heard from before the first load, so no commit falls between the
	// load's read and the subscription (one during the load is read
	// again after it: ReloadIndex).
	s.idx.Store(market.NewIndex())
	db.OnOffersChanged(s.heardCommit)
	if err := s.ReloadIndex(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Processor is the payment processor the service moves money through.
func (s *Service) Processor() billing.Processor { return s.pay }

// PlatformFeeBP is the platform's fee in basis points.
func (s *Service) PlatformFeeBP() int { return s.feeBP }

// Now is the service's clock, in UTC.
func (s *Service) Now() time.Time { return s.now() }

// backoff is the wait before attempt n+1 after n failed attempts.
func backoff(attempts int) time.Duration {
	d := retryBase
	for i := 1; i < attempts && d < retryMax; i++ {
		d *= 2
	}
	return min(d, retryMax)
}

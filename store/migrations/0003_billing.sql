-- Billing: payments, processed webhook events, provider payout accounts,
-- incidents, settlements with per-step state, the double-entry ledger and
-- disputes. Same conventions as 0001: times INTEGER unix seconds UTC, money
-- INTEGER cents, booleans INTEGER 0/1; NULL only where "never" is a real value.

-- One payment per reservation: the hosted checkout and, once paid, its
-- payment intent. status: open, paid, failed, refund_pending (paid after
-- the hold lapsed or the reservation was cancelled; refunded in full by the
-- retrier), refunded.
CREATE TABLE payments (
    reservation_id    INTEGER PRIMARY KEY REFERENCES reservations (id),
    checkout_id       TEXT    NOT NULL DEFAULT '',
    payment_intent_id TEXT    NOT NULL DEFAULT '',
    charge_id         TEXT    NOT NULL DEFAULT '',
    amount_cents      INTEGER NOT NULL,
    status            TEXT    NOT NULL,
    failure_message   TEXT    NOT NULL DEFAULT '',
    refunded_cents    INTEGER NOT NULL DEFAULT 0, -- as the processor last reported (charge.refunded)
    attempts          INTEGER NOT NULL DEFAULT 0, -- refund attempts (refund_pending only)
    next_attempt_at   INTEGER NOT NULL DEFAULT 0,
    last_error        TEXT    NOT NULL DEFAULT '',
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL
);
CREATE INDEX payments_checkout ON payments (checkout_id);
CREATE INDEX payments_intent ON payments (payment_intent_id);
CREATE INDEX payments_status ON payments (status, next_attempt_at);

-- Every webhook event handled, by the processor's event id: a replay is a no-op.
CREATE TABLE processed_events (
    event_id     TEXT    PRIMARY KEY,
    type         TEXT    NOT NULL,
    processed_at INTEGER NOT NULL
);

-- A provider's connected (Express) account and how far onboarding got.
-- event_at is the creation time of the newest account event applied, so an
-- older event delivered late cannot undo a newer one.
CREATE TABLE payout_accounts (
    provider_id       INTEGER PRIMARY KEY REFERENCES users (id),
    account_id        TEXT    NOT NULL,
    details_submitted INTEGER NOT NULL DEFAULT 0,
    charges_enabled   INTEGER NOT NULL DEFAULT 0,
    payouts_enabled   INTEGER NOT NULL DEFAULT 0,
    event_at          INTEGER NOT NULL DEFAULT 0,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL
);
CREATE UNIQUE INDEX payout_accounts_account ON payout_accounts (account_id);

-- Something that went wrong on a reservation piece. reported_by: provider
-- (applies at once) or buyer (applies once the provider acknowledges it).
CREATE TABLE incidents (
    id               INTEGER PRIMARY KEY,
    reservation_id   INTEGER NOT NULL REFERENCES reservations (id),
    piece_id         INTEGER NOT NULL REFERENCES reservation_pieces (id),
    kind             TEXT    NOT NULL,
    start_at         INTEGER NOT NULL,
    end_at           INTEGER NOT NULL,
    devices_affected INTEGER NOT NULL,
    degradation_bp   INTEGER NOT NULL DEFAULT 0,
    note             TEXT    NOT NULL,
    reported_by      TEXT    NOT NULL,
    reporter_id      INTEGER NOT NULL REFERENCES users (id),
    acknowledged     INTEGER NOT NULL DEFAULT 0,
    acknowledged_at  INTEGER,
    disputed_at      INTEGER, -- an unacknowledged buyer report became a dispute
    created_at       INTEGER NOT NULL
);
CREATE INDEX incidents_reservation ON incidents (reservation_id, id);
CREATE INDEX incidents_pending ON incidents (acknowledged, disputed_at, created_at);

-- One settlement per reservation: the statement and the state of each step.
-- state: pending (steps left; the retrier runs it at next_attempt_at),
-- failed (gave up after the attempts allowed; an admin retries), done.
CREATE TABLE settlements (
    reservation_id  INTEGER PRIMARY KEY REFERENCES reservations (id),
    statement_json  TEXT    NOT NULL,
    refund_cents    INTEGER NOT NULL,
    refund_done     INTEGER NOT NULL DEFAULT 0,
    refund_ref      TEXT    NOT NULL DEFAULT '',
    state           TEXT    NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT    NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    settled_at      INTEGER
);
CREATE INDEX settlements_due ON settlements (state, next_attempt_at);

-- One transfer per provider of a settlement. state: pending, held (the
-- provider has not finished onboarding), frozen (a dispute is open), done.
CREATE TABLE settlement_transfers (
    reservation_id INTEGER NOT NULL REFERENCES settlements (reservation_id),
    provider_id    INTEGER NOT NULL REFERENCES users (id),
    amount_cents   INTEGER NOT NULL,
    fee_cents      INTEGER NOT NULL,
    state          TEXT    NOT NULL,
    transfer_ref   TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (reservation_id, provider_id)
);
CREATE INDEX settlement_transfers_provider ON settlement_transfers (provider_id, state);

-- The ledger: append-only double-entry rows (market.LedgerEntry); the
-- idempotency key is the same as on the processor call behind the row.
CREATE TABLE ledger_entries (
    id              INTEGER PRIMARY KEY,
    reservation_id  INTEGER NOT NULL REFERENCES reservations (id),
    kind            TEXT    NOT NULL,
    debit_account   TEXT    NOT NULL,
    credit_account  TEXT    NOT NULL,
    amount_cents    INTEGER NOT NULL CHECK (amount_cents > 0),
    stripe_ref      TEXT    NOT NULL DEFAULT '',
    idempotency_key TEXT    NOT NULL,
    at              INTEGER NOT NULL
);
CREATE UNIQUE INDEX ledger_entries_key ON ledger_entries (idempotency_key);
CREATE INDEX ledger_entries_reservation ON ledger_entries (reservation_id, id);

CREATE TRIGGER ledger_entries_append_only_update BEFORE UPDATE ON ledger_entries
BEGIN SELECT RAISE(ABORT, 'ledger entries are append-only'); END;
CREATE TRIGGER ledger_entries_append_only_delete BEFORE DELETE ON ledger_entries
BEGIN SELECT RAISE(ABORT, 'ledger entries are append-only'); END;

-- Cases for admins. source: stripe (a chargeback) or incident (a buyer's
-- report the provider did not acknowledge in time). An open dispute freezes
-- the provider payouts of its reservation.
CREATE TABLE disputes (
    id                INTEGER PRIMARY KEY,
    reservation_id    INTEGER NOT NULL REFERENCES reservations (id),
    source            TEXT    NOT NULL,
    stripe_dispute_id TEXT,
    incident_id       INTEGER REFERENCES incidents (id),
    status            TEXT    NOT NULL DEFAULT 'open',
    statement         TEXT    NOT NULL,
    created_at        INTEGER NOT NULL
);
CREATE UNIQUE INDEX disputes_stripe ON disputes (stripe_dispute_id) WHERE stripe_dispute_id IS NOT NULL;
CREATE UNIQUE INDEX disputes_incident ON disputes (incident_id) WHERE incident_id IS NOT NULL;
CREATE INDEX disputes_reservation ON disputes (reservation_id, status);

-- Metered rentals (issue 29, docs/metered.md): started now with no end,
-- billed per minute of usable time from the buyer's prepaid balance.

-- Offers that allow metered rentals, with the provider's notice to stop
-- one (0: market.MeteredDefaultNoticeMinutes). No row: not allowed.
CREATE TABLE offer_metered (
    offer_id       INTEGER PRIMARY KEY REFERENCES offers (id),
    notice_minutes INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
);

-- Top-ups of a buyer's balance. state: pending (recorded before the
-- processor call, key market.TopUpKey), paid, failed. method: saved (the
-- buyer's saved card, charged at once) or checkout (a hosted payment page,
-- checkout_id). refunded_cents: what refunds of unused balance returned
-- to this payment (never more than amount_cents).
CREATE TABLE balance_topups (
    id                INTEGER PRIMARY KEY,
    buyer_id          INTEGER NOT NULL REFERENCES users (id),
    amount_cents      INTEGER NOT NULL CHECK (amount_cents > 0),
    method            TEXT    NOT NULL,
    state             TEXT    NOT NULL,
    payment_intent_id TEXT    NOT NULL DEFAULT '',
    checkout_id       TEXT    NOT NULL DEFAULT '',
    refunded_cents    INTEGER NOT NULL DEFAULT 0 CHECK (refunded_cents >= 0 AND refunded_cents <= amount_cents),
    last_error        TEXT    NOT NULL DEFAULT '',
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL
);
CREATE INDEX balance_topups_buyer ON balance_topups (buyer_id, id);
CREATE INDEX balance_topups_state ON balance_topups (state, id);

-- A buyer's request to refund unused balance, divided over the paid
-- top-ups (market.RefundPlan): one part per top-up, refund_ref set once
-- the processor refunded it.
CREATE TABLE balance_refund_parts (
    refund_id    INTEGER NOT NULL,
    topup_id     INTEGER NOT NULL REFERENCES balance_topups (id),
    buyer_id     INTEGER NOT NULL REFERENCES users (id),
    amount_cents INTEGER NOT NULL CHECK (amount_cents > 0),
    refund_ref   TEXT    NOT NULL DEFAULT '',
    last_error   TEXT    NOT NULL DEFAULT '',
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (refund_id, topup_id)
);
CREATE INDEX balance_refund_parts_pending ON balance_refund_parts (refund_ref);

-- The balance ledger (market.BalanceEntry): top-ups, draws of metered
-- time, refunds of unused balance, and the fee and payout of metered
-- earnings. A double-entry ledger of its own: a top-up belongs to no
-- reservation (reservation_id is set on a rental's draws and payouts).
CREATE TABLE balance_entries (
    id              INTEGER PRIMARY KEY,
    buyer_id        INTEGER NOT NULL REFERENCES users (id),
    reservation_id  INTEGER REFERENCES reservations (id),
    kind            TEXT    NOT NULL,
    debit_account   TEXT    NOT NULL,
    credit_account  TEXT    NOT NULL,
    amount_cents    INTEGER NOT NULL CHECK (amount_cents > 0),
    stripe_ref      TEXT    NOT NULL DEFAULT '',
    idempotency_key TEXT    NOT NULL,
    at              INTEGER NOT NULL
);
CREATE UNIQUE INDEX balance_entries_key ON balance_entries (idempotency_key);
CREATE INDEX balance_entries_buyer ON balance_entries (buyer_id, id);

CREATE TRIGGER balance_entries_append_only_update BEFORE UPDATE ON balance_entries
BEGIN SELECT RAISE(ABORT, 'balance entries are append-only'); END;
CREATE TRIGGER balance_entries_append_only_delete BEFORE DELETE ON balance_entries
BEGIN SELECT RAISE(ABORT, 'balance entries are append-only'); END;

-- A metered rental: its reservation (one piece, active with a rolling end
-- notice_minutes ahead), the price frozen at start, the clock (start once
-- the machine is usable; stop_at once it stopped, stop_reason why), what
-- was drawn so far (minutes since the clock start, and their cents), and
-- the payout of its earnings once final (the last draw made).
CREATE TABLE metered_rentals (
    reservation_id  INTEGER PRIMARY KEY REFERENCES reservations (id),
    buyer_id        INTEGER NOT NULL REFERENCES users (id),
    offer_id        INTEGER NOT NULL REFERENCES offers (id),
    provider_id     INTEGER NOT NULL REFERENCES users (id),
    piece_id        INTEGER NOT NULL REFERENCES reservation_pieces (id),
    devices         INTEGER NOT NULL,
    price_cents     INTEGER NOT NULL,
    notice_minutes  INTEGER NOT NULL,
    max_minutes     INTEGER NOT NULL DEFAULT 0,
    clock_start_at  INTEGER,
    stop_at         INTEGER,
    stop_reason     TEXT    NOT NULL DEFAULT '',
    drawn_minutes   INTEGER NOT NULL DEFAULT 0,
    drawn_cents     INTEGER NOT NULL DEFAULT 0,
    warned_at       INTEGER,
    final           INTEGER NOT NULL DEFAULT 0,
    fee_cents       INTEGER NOT NULL DEFAULT 0,
    payout_cents    INTEGER NOT NULL DEFAULT 0,
    transfer_ref    TEXT    NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);
CREATE INDEX metered_rentals_open ON metered_rentals (final, reservation_id);
CREATE INDEX metered_rentals_buyer ON metered_rentals (buyer_id, reservation_id);

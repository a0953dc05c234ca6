-- Charges recorded before they are made (issue 22). Every off-session
-- charge of a saved card is first written here, in the same transaction
-- that decides it (a spot clearing's award, a standing order's fill, a
-- buyer's "pay with saved card", a resale purchase), then made after the
-- commit under the idempotency key market.ChargeIntentKey(id), and
-- finished in the transaction that records its outcome (the payment, the
-- sale, the unsold payment's refund, or the decline). A crash in between
-- leaves the row pending for the retrier, which repeats the call with the
-- same key (the processor answers with the first call's payment, or makes
-- it now) and records what it finds.
--
-- purpose: 'reservation' (reservation_id is paid) or 'resale'
-- (listing_id is bought, reservation_id is the listing's original).
-- state: pending, done (outcome recorded), declined (the bank refused:
-- nothing charged). payment_intent_id: the processor's payment, once known.
CREATE TABLE charge_intents (
    id                  INTEGER PRIMARY KEY,
    purpose             TEXT    NOT NULL,
    buyer_id            INTEGER NOT NULL REFERENCES users (id),
    reservation_id      INTEGER NOT NULL REFERENCES reservations (id),
    listing_id          INTEGER REFERENCES resale_listings (id),
    payment_method_id   INTEGER NOT NULL REFERENCES payment_methods (id),
    amount_cents        INTEGER NOT NULL,
    state               TEXT    NOT NULL,
    payment_intent_id   TEXT    NOT NULL DEFAULT '',
    outcome             TEXT    NOT NULL DEFAULT '',
    attempts            INTEGER NOT NULL DEFAULT 0,
    next_attempt_at     INTEGER NOT NULL,
    last_error          TEXT    NOT NULL DEFAULT '',
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL
);
CREATE INDEX charge_intents_due ON charge_intents (state, next_attempt_at);
CREATE INDEX charge_intents_reservation ON charge_intents (reservation_id, state);
CREATE INDEX charge_intents_payment ON charge_intents (payment_intent_id);
-- One charge in flight per thing paid for and buyer: a repeated press, or
-- a second replica, finds the pending one instead of charging again.
CREATE UNIQUE INDEX charge_intents_one_pending ON charge_intents (purpose, reservation_id, COALESCE(listing_id, 0), buyer_id)
    WHERE state = 'pending';

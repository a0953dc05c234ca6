-- Money you can trust (issue 16).
--
-- disputes.amount_cents: what the buyer's bank took back in a chargeback
-- (0 for a buyer's dispute); chargebacks are ledger entries of their own.
ALTER TABLE disputes ADD COLUMN amount_cents INTEGER NOT NULL DEFAULT 0;
-- disputes.outcome for chargebacks: '' while the bank decides, won or lost.
ALTER TABLE disputes ADD COLUMN bank_outcome TEXT NOT NULL DEFAULT '';

-- Payments that do not match what a reservation's checkout asked for: the
-- wrong amount or currency, another payment intent for a reservation paid
-- already. Each is recorded and refunded in full by the retrier (state
-- refund_pending → refunded), never taken as the reservation's payment.
CREATE TABLE payment_exceptions (
    id                INTEGER PRIMARY KEY,
    reservation_id    INTEGER NOT NULL REFERENCES reservations (id),
    payment_intent_id TEXT    NOT NULL,
    amount_cents      INTEGER NOT NULL,
    currency          TEXT    NOT NULL,
    reason            TEXT    NOT NULL,
    state             TEXT    NOT NULL, -- refund_pending, refunded
    refund_ref        TEXT    NOT NULL DEFAULT '',
    attempts          INTEGER NOT NULL DEFAULT 0,
    last_error        TEXT    NOT NULL DEFAULT '',
    next_attempt_at   INTEGER NOT NULL,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    UNIQUE (payment_intent_id)
);
CREATE INDEX payment_exceptions_due ON payment_exceptions (state, next_attempt_at);

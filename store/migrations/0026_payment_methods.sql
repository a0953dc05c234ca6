-- Saved payment methods (issue 15): cards a buyer saved with the payment
-- processor through a Checkout in setup mode, charged later off-session.
-- customer_id: the processor's customer the card is attached to (one per
-- account, kept on removed rows so the account keeps its customer);
-- processor_method_id: the processor's id of the card (pm_…); label: what
-- the buyer sees ("Visa •••• 4242"). removed_at: when the buyer removed it
-- (NULL while saved); a removed card is never charged again, the row stays
-- for the payments it made. The default is the most recent card saved.
CREATE TABLE payment_methods (
    id                  INTEGER PRIMARY KEY,
    user_id             INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    customer_id         TEXT    NOT NULL,
    processor_method_id TEXT    NOT NULL,
    label               TEXT    NOT NULL,
    created_at          INTEGER NOT NULL,
    removed_at          INTEGER,
    UNIQUE (user_id, processor_method_id)
);
CREATE INDEX payment_methods_user ON payment_methods (user_id, removed_at);

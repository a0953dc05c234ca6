-- Disputes (admin): buyers open disputes with a reason and a statement,
-- both parties add statements, an admin decides with a reason: a credit
-- (refunded to the buyer through the processor) or a rejection. Extends
-- billing's disputes table (0003).

ALTER TABLE disputes ADD COLUMN opened_by INTEGER REFERENCES users (id);
ALTER TABLE disputes ADD COLUMN reason TEXT NOT NULL DEFAULT '';
ALTER TABLE disputes ADD COLUMN credit_cents INTEGER NOT NULL DEFAULT 0;
ALTER TABLE disputes ADD COLUMN decision_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE disputes ADD COLUMN decided_by INTEGER REFERENCES users (id);
ALTER TABLE disputes ADD COLUMN decided_at INTEGER;
-- refund_state: '' (nothing to refund), pending (granted, refund not yet
-- confirmed by the processor), done.
ALTER TABLE disputes ADD COLUMN refund_state TEXT NOT NULL DEFAULT '';
ALTER TABLE disputes ADD COLUMN refund_ref TEXT NOT NULL DEFAULT '';

-- Statements of the parties after the opening one, in order.
CREATE TABLE dispute_messages (
    id         INTEGER PRIMARY KEY,
    dispute_id INTEGER NOT NULL REFERENCES disputes (id),
    author_id  INTEGER NOT NULL REFERENCES users (id),
    role       TEXT    NOT NULL, -- buyer or provider
    body       TEXT    NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX dispute_messages_dispute ON dispute_messages (dispute_id, id);

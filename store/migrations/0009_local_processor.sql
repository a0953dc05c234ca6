-- The local test processor (billing.Local, used when no Stripe key is
-- configured) keeps its checkouts, payments, refunds, transfers and
-- connected accounts here, so a restart forgets none of them and the ledger
-- still reconciles against them. Ids are derived from the idempotency key
-- ("local_re_<hash>"), so a retried call finds the object it made before.

CREATE TABLE local_processor_objects (
    kind            TEXT    NOT NULL,            -- checkout, payment, refund, transfer or account
    id              TEXT    NOT NULL,            -- the processor's id, e.g. local_re_1a2b…
    idempotency_key TEXT    NOT NULL,            -- '' for an account stored from its id alone
    parent_id       TEXT    NOT NULL DEFAULT '', -- a payment's checkout, a refund's payment intent, a transfer's account
    amount_cents    INTEGER NOT NULL DEFAULT 0,
    data            TEXT    NOT NULL,            -- the other fields, as billing encodes them (JSON)
    PRIMARY KEY (kind, id)
);
CREATE UNIQUE INDEX local_processor_objects_key ON local_processor_objects (kind, idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX local_processor_objects_parent ON local_processor_objects (kind, parent_id);

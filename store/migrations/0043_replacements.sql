-- Automatic replacement (issue 26, docs/replacement.md). One row per
-- measured outage that triggered a replacement (host failure past the
-- grace period, or fewer healthy devices than the piece holds, measured by
-- the agent while the piece ran): outage_id is the idempotency key — a
-- restarted server or a second replica never books two replacements for
-- one outage — and the outage becomes the incident it already is.
--
-- state: booked (the replacement's pieces were added to the reservation
-- and the original piece ends at from_at), offered (ask policy: waiting
-- for the buyer until offer_expires_at), lapsed (offered, not confirmed in
-- time), unfilled (nothing fits, or the money rule refused; reason says
-- why), not_wanted (policy never). piece_ids are the replacement pieces
-- (comma-separated ids), tier where they were found (market.ReplacementTier).
-- The money (market.ReplacementSplit): remaining_cents of the original paid
-- for [from_at, until_at), delivered_cents kept by the original piece,
-- cost_cents of the replacement, refund_cents back to the buyer,
-- provider_share_cents borne by the failing provider, buyer_share_cents
-- paid by the buyer. The refund is made on the buyer's payment by the
-- retrier: refund_done, refund_ref, attempts, next_attempt_at, last_error
-- as in settlements.
CREATE TABLE replacements (
    id                   INTEGER PRIMARY KEY,
    outage_id            INTEGER NOT NULL REFERENCES measured_outages (id),
    reservation_id       INTEGER NOT NULL REFERENCES reservations (id),
    piece_id             INTEGER NOT NULL REFERENCES reservation_pieces (id),
    failed_node          INTEGER NOT NULL,
    kind                 TEXT    NOT NULL,
    policy               TEXT    NOT NULL,
    state                TEXT    NOT NULL,
    reason               TEXT    NOT NULL DEFAULT '',
    tier                 INTEGER NOT NULL DEFAULT 0,
    piece_ids            TEXT    NOT NULL DEFAULT '',
    from_at              INTEGER NOT NULL,
    until_at             INTEGER NOT NULL,
    offer_expires_at     INTEGER NOT NULL DEFAULT 0,
    remaining_cents      INTEGER NOT NULL DEFAULT 0,
    delivered_cents      INTEGER NOT NULL DEFAULT 0,
    cost_cents           INTEGER NOT NULL DEFAULT 0,
    refund_cents         INTEGER NOT NULL DEFAULT 0,
    provider_share_cents INTEGER NOT NULL DEFAULT 0,
    buyer_share_cents    INTEGER NOT NULL DEFAULT 0,
    refund_done          INTEGER NOT NULL DEFAULT 1,
    refund_ref           TEXT    NOT NULL DEFAULT '',
    attempts             INTEGER NOT NULL DEFAULT 0,
    next_attempt_at      INTEGER NOT NULL DEFAULT 0,
    last_error           TEXT    NOT NULL DEFAULT '',
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL
);
CREATE UNIQUE INDEX replacements_outage ON replacements (outage_id);
CREATE INDEX replacements_reservation ON replacements (reservation_id, id);
CREATE INDEX replacements_state ON replacements (state, offer_expires_at);
CREATE INDEX replacements_refund_due ON replacements (refund_done, next_attempt_at);

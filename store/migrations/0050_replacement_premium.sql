-- Replacement, second part (issue 26, docs/replacement.md).
--
-- A dearer replacement's buyer share is charged off-session to the
-- buyer's saved card before the replacement is booked. The decision
-- records the plan and a pending charge intent in one transaction (state
-- 'charging'); the booking is made in the transaction that records the
-- paid charge, and finishes the intent. charge_intent_id names that intent
-- (0: none), planned_pieces the planned pieces (market.ReservationPiece as
-- text) to book once paid, premium_ref the processor's payment of the
-- share, refunded in full with refund_cents when the plan could no longer
-- be booked.
--
-- An admin may trigger a replacement from an incident (a buyer's report,
-- which alone never triggers one): such a row has no measured outage
-- (outage_id NULL) and is keyed on incident_id instead, so it too is
-- decided once. The table is rebuilt to let outage_id be NULL.
CREATE TABLE replacements_new (
    id                   INTEGER PRIMARY KEY,
    outage_id            INTEGER REFERENCES measured_outages (id),
    incident_id          INTEGER REFERENCES incidents (id),
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
    charge_intent_id     INTEGER NOT NULL DEFAULT 0,
    planned_pieces       TEXT    NOT NULL DEFAULT '',
    premium_ref          TEXT    NOT NULL DEFAULT '',
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL
);
INSERT INTO replacements_new (id, outage_id, reservation_id, piece_id, failed_node, kind, policy, state, reason, tier, piece_ids,
    from_at, until_at, offer_expires_at, remaining_cents, delivered_cents, cost_cents, refund_cents, provider_share_cents,
    buyer_share_cents, refund_done, refund_ref, attempts, next_attempt_at, last_error, created_at, updated_at)
SELECT id, outage_id, reservation_id, piece_id, failed_node, kind, policy, state, reason, tier, piece_ids,
    from_at, until_at, offer_expires_at, remaining_cents, delivered_cents, cost_cents, refund_cents, provider_share_cents,
    buyer_share_cents, refund_done, refund_ref, attempts, next_attempt_at, last_error, created_at, updated_at FROM replacements;
DROP TABLE replacements;
ALTER TABLE replacements_new RENAME TO replacements;
CREATE UNIQUE INDEX replacements_outage ON replacements (outage_id);
CREATE UNIQUE INDEX replacements_incident ON replacements (incident_id);
CREATE INDEX replacements_reservation ON replacements (reservation_id, id);
CREATE INDEX replacements_state ON replacements (state, offer_expires_at);
CREATE INDEX replacements_refund_due ON replacements (refund_done, next_attempt_at);
CREATE INDEX replacements_charge_intent ON replacements (charge_intent_id);

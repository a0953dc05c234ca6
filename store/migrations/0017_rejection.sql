-- Issue 11: the buyer's acceptance period, measured reliability and the
-- provider's notes on incidents its agent raised.
--
-- reject_minutes: for how many minutes from the start of a rental the
-- buyer may reject it for a full refund (0: not at all). Offers default to
-- 30 minutes; each piece freezes its offer's value at booking, so pieces
-- booked before this migration allow no rejection.
ALTER TABLE offers ADD COLUMN reject_minutes INTEGER NOT NULL DEFAULT 30;
ALTER TABLE reservation_pieces ADD COLUMN reject_minutes INTEGER NOT NULL DEFAULT 0;

-- A rejected reservation is cancelled with rejected_at set and the buyer's
-- reason kept; its settlement refunds everything and pays no provider.
ALTER TABLE reservations ADD COLUMN rejected_at INTEGER;
ALTER TABLE reservations ADD COLUMN reject_reason TEXT NOT NULL DEFAULT '';

-- A provider's notes on an incident its agent measured, append-only, in
-- the order written; they show in the incident and dispute timelines.
CREATE TABLE incident_notes (
    id          INTEGER PRIMARY KEY,
    incident_id INTEGER NOT NULL REFERENCES incidents (id),
    author_id   INTEGER NOT NULL REFERENCES users (id),
    body        TEXT    NOT NULL,
    created_at  INTEGER NOT NULL
);
CREATE INDEX incident_notes_incident ON incident_notes (incident_id, id);

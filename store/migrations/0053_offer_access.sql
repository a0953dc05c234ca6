-- How buyers get onto an offer's hosts (issue 31, docs/booking.md).
-- access_mode: agent (the hosts run the provider agent: keys installed and
-- removed automatically, outages measured) or manual (the provider gives
-- access by hand); access_instructions: for manual, how, shown to the
-- buyer once the reservation is paid. Every offer before this ran the
-- agent as far as the product knew.
ALTER TABLE offers ADD COLUMN access_mode TEXT NOT NULL DEFAULT 'agent';
ALTER TABLE offers ADD COLUMN access_instructions TEXT NOT NULL DEFAULT '';

-- A reservation's messages between its buyer and its providers, readable
-- by admins (a dispute's evidence). author_id is who wrote it; the other
-- party is notified (and mailed) in the same transaction.
CREATE TABLE reservation_messages (
    id             INTEGER PRIMARY KEY,
    reservation_id INTEGER NOT NULL REFERENCES reservations (id),
    author_id      INTEGER NOT NULL REFERENCES users (id),
    body           TEXT    NOT NULL,
    created_at     INTEGER NOT NULL
);
CREATE INDEX reservation_messages_reservation ON reservation_messages (reservation_id, id);

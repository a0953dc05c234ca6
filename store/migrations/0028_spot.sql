-- The spot market for interruptible capacity (market/spot.go). Buyers'
-- standing bids; one clearing row per offer and hour (unique: on several
-- replicas, or a tick repeated, an hour clears once); one allocation per
-- bid that won an hour, with the one-hour reservation it became and, when
-- the bid did not win the next hour of its window, the preemption incident.

CREATE TABLE spot_bids (
    id          INTEGER PRIMARY KEY,
    buyer_id    INTEGER NOT NULL REFERENCES users (id),
    offer_id    INTEGER NOT NULL REFERENCES offers (id),
    devices     INTEGER NOT NULL,
    max_cents   INTEGER NOT NULL, -- per device-hour
    first_hour  INTEGER NOT NULL, -- Unix seconds of a whole UTC hour
    last_hour   INTEGER NOT NULL, -- the window's last hour, included
    placed_at   INTEGER NOT NULL,
    state       TEXT    NOT NULL, -- live, cancelled, finished (market.SpotBidState)
    end_note    TEXT    NOT NULL DEFAULT '',
    updated_at  INTEGER NOT NULL
);
CREATE INDEX spot_bids_live ON spot_bids (state, offer_id);
CREATE INDEX spot_bids_buyer ON spot_bids (buyer_id, id);

CREATE TABLE spot_clearings (
    id            INTEGER PRIMARY KEY,
    offer_id      INTEGER NOT NULL REFERENCES offers (id),
    hour          INTEGER NOT NULL, -- Unix seconds of the hour's start
    accelerator_id TEXT   NOT NULL,
    floor_cents   INTEGER NOT NULL,
    price_cents   INTEGER NOT NULL, -- 0 when nothing sold
    capacity      INTEGER NOT NULL,
    devices_bid   INTEGER NOT NULL,
    devices_sold  INTEGER NOT NULL,
    cleared_at    INTEGER NOT NULL,
    UNIQUE (offer_id, hour)
);
CREATE INDEX spot_clearings_hour ON spot_clearings (hour);

CREATE TABLE spot_allocations (
    id             INTEGER PRIMARY KEY,
    clearing_id    INTEGER NOT NULL REFERENCES spot_clearings (id),
    bid_id         INTEGER NOT NULL REFERENCES spot_bids (id),
    offer_id       INTEGER NOT NULL REFERENCES offers (id),
    hour           INTEGER NOT NULL,
    reservation_id INTEGER NOT NULL REFERENCES reservations (id),
    devices        INTEGER NOT NULL,
    price_cents    INTEGER NOT NULL,
    preempted      INTEGER NOT NULL DEFAULT 0, -- the bid lost the next hour of its window
    incident_id    INTEGER REFERENCES incidents (id),
    UNIQUE (bid_id, hour)
);
CREATE INDEX spot_allocations_offer ON spot_allocations (offer_id, hour);
CREATE INDEX spot_allocations_reservation ON spot_allocations (reservation_id);

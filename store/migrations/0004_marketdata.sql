-- Market data: per-offer hourly carbon profiles and buyers' measured-work
-- reports. Same conventions as 0001: times INTEGER unix seconds UTC.

-- A provider's own hourly carbon intensity for an offer's site, overriding
-- the region's built-in profile. hourly_g is 24 comma-separated whole
-- gCO2/kWh values, for 00:00..23:00 UTC.
CREATE TABLE offer_carbon_profiles (
    offer_id   INTEGER PRIMARY KEY REFERENCES offers (id) ON DELETE CASCADE,
    hourly_g   TEXT    NOT NULL,
    source     TEXT    NOT NULL,
    updated_at INTEGER NOT NULL
);

-- What a buyer measured on a reservation's piece on one offer: throughput
-- while running (metric: steps_per_hour or tokens_per_sec, the latter at a
-- stated latency percentile), over observed_minutes of wall-clock time of
-- which lost_minutes went to restarts and stalls. devices and
-- accelerator_id are copied from the piece and its offer at report time.
CREATE TABLE work_reports (
    id                 INTEGER PRIMARY KEY,
    reservation_id     INTEGER NOT NULL REFERENCES reservations (id) ON DELETE CASCADE,
    offer_id           INTEGER NOT NULL REFERENCES offers (id),
    reporter_id        INTEGER NOT NULL REFERENCES users (id),
    accelerator_id     TEXT    NOT NULL,
    devices            INTEGER NOT NULL,
    metric             TEXT    NOT NULL,
    latency_percentile INTEGER NOT NULL,
    workload           TEXT    NOT NULL,
    value              INTEGER NOT NULL,
    observed_minutes   INTEGER NOT NULL,
    lost_minutes       INTEGER NOT NULL,
    note               TEXT    NOT NULL,
    created_at         INTEGER NOT NULL
);
CREATE INDEX work_reports_offer ON work_reports (offer_id, metric);
CREATE INDEX work_reports_accelerator ON work_reports (accelerator_id, metric);
CREATE INDEX work_reports_reservation ON work_reports (reservation_id, created_at);

-- The price index reads booked pieces by trade date.
CREATE INDEX reservations_created ON reservations (created_at, state);

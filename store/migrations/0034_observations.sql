-- Issue 23: what the buyer's own machine saw on a rented node (the script
-- on the reservation page, docs/agent.md), compared when it came in with
-- the listing and the provider's agent's report (market.CompareObservation).
-- devices_json: [{"Name":…, "MemoryMiB":…}]; bench_kind '' when no
-- benchmark ran; bench_milli: TFLOPS thousandths. agent_summary: the
-- agent's report then, in words; reasons_json: the mismatches ([] when it
-- agreed); mismatch: 1 when there is any (a red flag).
CREATE TABLE observations (
    id             INTEGER PRIMARY KEY,
    reservation_id INTEGER NOT NULL REFERENCES reservations (id),
    piece_id       INTEGER NOT NULL REFERENCES reservation_pieces (id),
    node           INTEGER NOT NULL,
    offer_id       INTEGER NOT NULL REFERENCES offers (id),
    provider_id    INTEGER NOT NULL REFERENCES users (id),
    buyer_id       INTEGER NOT NULL REFERENCES users (id),
    devices_json   TEXT    NOT NULL,
    bench_kind     TEXT    NOT NULL,
    bench_milli    INTEGER NOT NULL,
    bench_seconds  INTEGER NOT NULL,
    agent_summary  TEXT    NOT NULL,
    reasons_json   TEXT    NOT NULL,
    mismatch       INTEGER NOT NULL,
    created_at     INTEGER NOT NULL
);
CREATE INDEX observations_reservation ON observations (reservation_id, created_at);
CREATE INDEX observations_offer ON observations (offer_id, mismatch, created_at);
CREATE INDEX observations_provider ON observations (provider_id, mismatch, created_at);

-- Acceptance tests (docs/agent.md, issue 11): what a provider's agent
-- measured on a node when a rental started, one result per piece and node
-- (a result posted again changes nothing). per_device_json: the figures in
-- thousandths of the metric's unit. guaranteed: the offer's guaranteed
-- figure for the metric then (0: none); devices_below and shortfall_bp:
-- market.Underperformance against it.
CREATE TABLE acceptance_results (
    piece_id         INTEGER NOT NULL REFERENCES reservation_pieces (id),
    node             INTEGER NOT NULL,
    offer_id         INTEGER NOT NULL REFERENCES offers (id),
    metric           TEXT    NOT NULL,
    per_device_json  TEXT    NOT NULL,
    duration_seconds INTEGER NOT NULL,
    error            TEXT    NOT NULL,
    guaranteed       INTEGER NOT NULL,
    devices_below    INTEGER NOT NULL,
    shortfall_bp     INTEGER NOT NULL,
    created_at       INTEGER NOT NULL,
    PRIMARY KEY (piece_id, node)
);
CREATE INDEX acceptance_results_offer ON acceptance_results (offer_id, created_at);

-- An underperformance found by an acceptance test is a measured outage of
-- kind underperformance from the result to the piece's end, recorded as an
-- incident like the others: severity_bp is its shortfall, note its
-- evidence (other kinds build theirs from the heartbeat history).
ALTER TABLE measured_outages ADD COLUMN severity_bp INTEGER NOT NULL DEFAULT 0;
ALTER TABLE measured_outages ADD COLUMN note TEXT NOT NULL DEFAULT '';

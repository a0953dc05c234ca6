-- The SLA measured from heartbeats (docs/agent.md, issue 11). An outage of
-- one node serving one reservation piece, as the agent's heartbeats show
-- it: host_failure from the last heartbeat before a silence longer than the
-- grace period to the next one (or the piece's end); fewer_devices over the
-- heartbeats that showed fewer healthy devices than the piece holds on the
-- node. end_at is NULL while the outage lasts. Once it has ended it
-- becomes an incident (incident_id), reported by the agent and
-- acknowledged at once; recorded_at is set then, or when it could not be
-- (skipped says why: settlement had begun, nothing left of it).
CREATE TABLE measured_outages (
    id          INTEGER PRIMARY KEY,
    piece_id    INTEGER NOT NULL REFERENCES reservation_pieces (id),
    node        INTEGER NOT NULL,
    kind        TEXT    NOT NULL,
    start_at    INTEGER NOT NULL,
    end_at      INTEGER,
    devices     INTEGER NOT NULL,
    incident_id INTEGER REFERENCES incidents (id),
    recorded_at INTEGER,
    skipped     TEXT    NOT NULL DEFAULT '',
    created_at  INTEGER NOT NULL
);
-- One outage of a kind per piece, node and start: a silence seen again by
-- the next round is the same outage.
CREATE UNIQUE INDEX measured_outages_start ON measured_outages (piece_id, node, kind, start_at);
CREATE INDEX measured_outages_pending ON measured_outages (recorded_at) WHERE recorded_at IS NULL;

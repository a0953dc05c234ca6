-- The provider agent (docs/agent.md, issue 11): host tokens per node of an
-- offer, each node's latest status and a bounded heartbeat history.

-- One token per node of an offer, created by the provider; stored as the
-- SHA-256 of the raw token (gph_…) with its first characters for display.
-- At most one live (not revoked) token per node. last_seq is the highest
-- heartbeat sequence number seen with this token: a heartbeat whose seq is
-- not above it changes nothing.
CREATE TABLE host_tokens (
    id           INTEGER PRIMARY KEY,
    offer_id     INTEGER NOT NULL REFERENCES offers (id),
    node         INTEGER NOT NULL,
    prefix       TEXT    NOT NULL,
    token_hash   TEXT    NOT NULL,
    last_seq     INTEGER NOT NULL DEFAULT 0,
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER,
    revoked_at   INTEGER
);
CREATE UNIQUE INDEX host_tokens_hash ON host_tokens (token_hash);
CREATE UNIQUE INDEX host_tokens_live ON host_tokens (offer_id, node) WHERE revoked_at IS NULL;

-- The latest accepted heartbeat of each node that has reported.
-- devices_json: the devices as market.HostDevice JSON. hardware_differs:
-- why the devices differ from the listing, for the admins' red flag; ''
-- when they match (kept from the last heartbeat that could tell).
CREATE TABLE hosts (
    offer_id          INTEGER NOT NULL REFERENCES offers (id),
    node              INTEGER NOT NULL,
    last_heartbeat_at INTEGER NOT NULL,
    last_seq          INTEGER NOT NULL,
    agent_version     TEXT    NOT NULL,
    probe             TEXT    NOT NULL,
    probe_error       TEXT    NOT NULL,
    devices_json      TEXT    NOT NULL,
    healthy_devices   INTEGER NOT NULL,
    hardware_differs  TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (offer_id, node)
);

-- The heartbeat history, bounded: consecutive heartbeats of a node that
-- report the same health (device count, healthy count, unhealthy devices,
-- probe error) without a gap longer than the grace period form one run,
-- so the history grows with changes, not with time (and is capped per node
-- in store/host.go). It is the evidence of the SLA measured.
CREATE TABLE host_heartbeat_runs (
    id          INTEGER PRIMARY KEY,
    offer_id    INTEGER NOT NULL REFERENCES offers (id),
    node        INTEGER NOT NULL,
    first_at    INTEGER NOT NULL,
    last_at     INTEGER NOT NULL,
    first_seq   INTEGER NOT NULL,
    last_seq    INTEGER NOT NULL,
    heartbeats  INTEGER NOT NULL,
    devices     INTEGER NOT NULL,
    healthy     INTEGER NOT NULL,
    unhealthy   TEXT    NOT NULL, -- the unhealthy devices, e.g. "3 (GPU-…)"
    probe_error TEXT    NOT NULL
);
CREATE INDEX host_heartbeat_runs_node ON host_heartbeat_runs (offer_id, node, id);

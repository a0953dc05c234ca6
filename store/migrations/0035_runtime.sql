-- Issue 25: the buyer's environment (market.Runtime, docs/runtime.md).
-- Offers say whether they run buyer containers (market.ContainerSupport);
-- booleans INTEGER 0/1.
ALTER TABLE offers ADD COLUMN container_engine TEXT NOT NULL DEFAULT '';
ALTER TABLE offers ADD COLUMN container_cdi INTEGER NOT NULL DEFAULT 0;
ALTER TABLE offers ADD COLUMN container_max_image_gb INTEGER NOT NULL DEFAULT 0;
ALTER TABLE offers ADD COLUMN container_image_cache INTEGER NOT NULL DEFAULT 0;
ALTER TABLE offers ADD COLUMN shared_host_user INTEGER NOT NULL DEFAULT 0;

-- The runtime a reservation was booked with, secrets included
-- (market.EncodeRuntimeStored): read only to send to the agents of its
-- nodes, never shown or exported. One row per reservation with a runtime.
CREATE TABLE reservation_runtimes (
    reservation_id INTEGER PRIMARY KEY REFERENCES reservations (id),
    runtime_json   TEXT    NOT NULL
);

-- What the agent of a node reported of a piece's container
-- (market.ContainerPhase): pulling, ready, failed, removed; the device
-- indices the server gave the piece on the node (JSON array), the
-- published ports (JSON [{"container":22,"host":40022}]) and a message.
CREATE TABLE piece_containers (
    piece_id     INTEGER NOT NULL REFERENCES reservation_pieces (id),
    node         INTEGER NOT NULL,
    devices_json TEXT    NOT NULL,
    phase        TEXT    NOT NULL,
    message      TEXT    NOT NULL,
    ports_json   TEXT    NOT NULL,
    progress     INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (piece_id, node)
);

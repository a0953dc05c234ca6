-- Access handover (docs/agent.md, issue 11): buyers' SSH public keys, and
-- what each node's agent did with them for a reservation piece.

-- A buyer's SSH public keys, sent to the agents of the nodes they rent and
-- shown to no one else. public_key is the authorized_keys line without
-- options; fingerprint its SHA-256 fingerprint ("SHA256:…").
CREATE TABLE ssh_keys (
    id          INTEGER PRIMARY KEY,
    user_id     INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    key_type    TEXT    NOT NULL,
    bits        INTEGER NOT NULL,
    fingerprint TEXT    NOT NULL,
    comment     TEXT    NOT NULL,
    public_key  TEXT    NOT NULL,
    created_at  INTEGER NOT NULL
);
CREATE UNIQUE INDEX ssh_keys_user_fingerprint ON ssh_keys (user_id, fingerprint);

-- Per piece and node: the connection the agent reported once the buyer's
-- keys were in place (shown to the buyer only), and when they were
-- installed and removed. No row: nothing reported yet.
CREATE TABLE piece_access (
    piece_id     INTEGER NOT NULL REFERENCES reservation_pieces (id),
    node         INTEGER NOT NULL,
    host         TEXT    NOT NULL,
    port         INTEGER NOT NULL,
    ssh_user     TEXT    NOT NULL,
    installed_at INTEGER NOT NULL,
    removed_at   INTEGER,
    PRIMARY KEY (piece_id, node)
);

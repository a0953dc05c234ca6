-- Leases: background work that must run once across replicas (hold
-- expiry, settlement and its retries, measurement, pruning) runs on the
-- replica holding the lease named for it. holder: the replica's name and
-- process; expires_at: unix seconds UTC, renewed by the holder every tick.
CREATE TABLE leases (
    name       TEXT    PRIMARY KEY,
    holder     TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
);

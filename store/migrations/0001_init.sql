-- Foundation schema: accounts, sessions, throttling, settings, offers.
-- Conventions: every *_at / available_* column is INTEGER unix seconds, UTC;
-- booleans are INTEGER 0/1; money is INTEGER cents; ids are INTEGER.

CREATE TABLE users (
    id            INTEGER PRIMARY KEY,
    email         TEXT    NOT NULL,  -- normalised (trimmed, lower case)
    password_hash BLOB    NOT NULL,
    display_name  TEXT    NOT NULL,
    organisation  TEXT    NOT NULL DEFAULT '',
    is_buyer      INTEGER NOT NULL DEFAULT 0,
    is_provider   INTEGER NOT NULL DEFAULT 0,
    is_admin      INTEGER NOT NULL DEFAULT 0,
    suspended     INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL
);
CREATE UNIQUE INDEX users_email ON users (email);

-- A session row is keyed by the SHA-256 (hex) of the id in the cookie, so a
-- copy of the database does not hand out live sessions.
CREATE TABLE sessions (
    id_hash    TEXT    PRIMARY KEY,
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    csrf_token TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX sessions_user ON sessions (user_id);
CREATE INDEX sessions_expires ON sessions (expires_at);

-- One row per allowed attempt (login, sign-up) per throttle key.
CREATE TABLE throttle_hits (
    id           INTEGER PRIMARY KEY,
    throttle_key TEXT    NOT NULL,
    at           INTEGER NOT NULL
);
CREATE INDEX throttle_hits_key_at ON throttle_hits (throttle_key, at);

CREATE TABLE settings (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE offers (
    id                          INTEGER PRIMARY KEY,
    provider_id                 INTEGER NOT NULL REFERENCES users (id),
    title                       TEXT    NOT NULL,
    accelerator_id              TEXT    NOT NULL,
    memory_gb                   INTEGER NOT NULL,
    devices_per_node            INTEGER NOT NULL,
    nodes                       INTEGER NOT NULL,
    interconnect                TEXT    NOT NULL,
    network_id                  TEXT    NOT NULL,
    placement_group             INTEGER NOT NULL,
    cpu_cores                   INTEGER NOT NULL,
    ram_gb                      INTEGER NOT NULL,
    storage_gb                  INTEGER NOT NULL,
    driver_version              TEXT    NOT NULL,
    cuda_version                TEXT    NOT NULL,
    os_image                    TEXT    NOT NULL,
    container_runtime           TEXT    NOT NULL,
    region_id                   TEXT    NOT NULL,
    carbon_g_per_kwh            INTEGER NOT NULL,
    power_note                  TEXT    NOT NULL,
    available_from              INTEGER NOT NULL,
    available_until             INTEGER NOT NULL,
    min_rental_hours            INTEGER NOT NULL,
    max_rental_hours            INTEGER NOT NULL,
    provisioning_mins           INTEGER NOT NULL,
    preempt_notice_mins         INTEGER NOT NULL,
    price_cents_per_device_hour INTEGER NOT NULL,
    interruptible               INTEGER NOT NULL,
    interruptible_cents_per_dh  INTEGER NOT NULL,
    storage_cents_per_gb_month  INTEGER NOT NULL,
    egress_cents_per_gb         INTEGER NOT NULL,
    billing_basis               TEXT    NOT NULL,
    uptime_bp                   INTEGER NOT NULL,
    credit_cap_bp               INTEGER NOT NULL,
    free_cancel_hours           INTEGER NOT NULL,
    cancel_fee_bp               INTEGER NOT NULL,
    review                      TEXT    NOT NULL,
    review_note                 TEXT    NOT NULL,
    state                       TEXT    NOT NULL,
    created_at                  INTEGER NOT NULL,
    updated_at                  INTEGER NOT NULL
);
CREATE INDEX offers_provider ON offers (provider_id, created_at);
CREATE INDEX offers_listed ON offers (review, state, available_until);

-- Performance figures of an offer, at most one per kind, in the order the
-- provider stated them.
CREATE TABLE offer_figures (
    offer_id      INTEGER NOT NULL REFERENCES offers (id) ON DELETE CASCADE,
    kind          TEXT    NOT NULL,
    position      INTEGER NOT NULL,
    value         INTEGER NOT NULL,
    basis         TEXT    NOT NULL,
    method        TEXT    NOT NULL,
    verified_note TEXT    NOT NULL,
    PRIMARY KEY (offer_id, kind)
);

-- The SLA credit schedule of an offer, highest uptime first.
CREATE TABLE offer_credit_tiers (
    offer_id  INTEGER NOT NULL REFERENCES offers (id) ON DELETE CASCADE,
    position  INTEGER NOT NULL,
    below_bp  INTEGER NOT NULL,
    credit_bp INTEGER NOT NULL,
    PRIMARY KEY (offer_id, position)
);

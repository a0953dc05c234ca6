-- Buyers: reservations and their pieces, saved requests, personal API tokens.
-- Same conventions as 0001: times INTEGER unix seconds UTC, money INTEGER
-- cents, booleans INTEGER 0/1; NULL only where "never" is a real value.

-- A reservation books one quote, all or nothing. starts_at and ends_at are
-- the earliest piece start and latest piece end, kept here so the lifecycle
-- sweep (AdvanceReservations) reads one table.
CREATE TABLE reservations (
    id               INTEGER PRIMARY KEY,
    buyer_id         INTEGER NOT NULL REFERENCES users (id),
    state            TEXT    NOT NULL,
    amount_cents     INTEGER NOT NULL,
    hold_expires_at  INTEGER NOT NULL,
    cancel_fee_cents INTEGER NOT NULL DEFAULT 0,
    request_json     TEXT    NOT NULL,
    starts_at        INTEGER NOT NULL,
    ends_at          INTEGER NOT NULL,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
);
CREATE INDEX reservations_buyer ON reservations (buyer_id, state, hold_expires_at);
CREATE INDEX reservations_state ON reservations (state, hold_expires_at);

-- One piece per offer booked. A piece holds capacity while its reservation
-- is confirmed or active, or held with hold_expires_at still in the future:
-- an expired hold stops counting at once, before any sweep marks it.
CREATE TABLE reservation_pieces (
    id                INTEGER PRIMARY KEY,
    reservation_id    INTEGER NOT NULL REFERENCES reservations (id) ON DELETE CASCADE,
    position          INTEGER NOT NULL,
    offer_id          INTEGER NOT NULL REFERENCES offers (id),
    provider_id       INTEGER NOT NULL REFERENCES users (id),
    devices           INTEGER NOT NULL,
    start_at          INTEGER NOT NULL,
    end_at            INTEGER NOT NULL,
    interruptible     INTEGER NOT NULL,
    price_cents       INTEGER NOT NULL,
    amount_cents      INTEGER NOT NULL,
    free_cancel_hours INTEGER NOT NULL,
    cancel_fee_bp     INTEGER NOT NULL
);
CREATE INDEX reservation_pieces_reservation ON reservation_pieces (reservation_id, position);
CREATE INDEX reservation_pieces_offer ON reservation_pieces (offer_id, end_at);
CREATE INDEX reservation_pieces_provider ON reservation_pieces (provider_id, start_at);

-- A buyer's named request (the portable request JSON); one name per buyer.
CREATE TABLE saved_requests (
    id           INTEGER PRIMARY KEY,
    buyer_id     INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         TEXT    NOT NULL,
    request_json TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
);
CREATE UNIQUE INDEX saved_requests_buyer_name ON saved_requests (buyer_id, name);

-- Personal API tokens. Only the SHA-256 (hex) of the raw token is stored;
-- prefix is its first characters, for recognising it in a list.
CREATE TABLE api_tokens (
    id           INTEGER PRIMARY KEY,
    user_id      INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         TEXT    NOT NULL,
    scope        TEXT    NOT NULL,
    prefix       TEXT    NOT NULL,
    token_hash   TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER,
    revoked_at   INTEGER
);
CREATE UNIQUE INDEX api_tokens_hash ON api_tokens (token_hash);
CREATE INDEX api_tokens_user ON api_tokens (user_id, created_at);

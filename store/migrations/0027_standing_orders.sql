-- Standing orders: a buyer's request waiting for a price. request_json is
-- the portable request (market.EncodeRequestJSON); limit_kind 'price'
-- (limit_cents per reference device-hour) or 'budget' (limit_cents in
-- total); fill_by: unix seconds, the order expires unfilled then; on_fill
-- 'hold' or 'pay'; state open, filled, expired or cancelled (only open
-- changes, by conditional update); reservation_id: the fill's
-- reservation; note: what the buyer must know after a fill (a declined
-- payment).
CREATE TABLE standing_orders (
    id             INTEGER PRIMARY KEY,
    buyer_id       INTEGER NOT NULL REFERENCES users (id),
    request_json   TEXT    NOT NULL,
    limit_kind     TEXT    NOT NULL,
    limit_cents    INTEGER NOT NULL,
    fill_by        INTEGER NOT NULL,
    on_fill        TEXT    NOT NULL,
    state          TEXT    NOT NULL,
    reservation_id INTEGER REFERENCES reservations (id),
    note           TEXT    NOT NULL DEFAULT '',
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
);
CREATE INDEX standing_orders_buyer ON standing_orders (buyer_id, state);
CREATE INDEX standing_orders_state ON standing_orders (state, fill_by);

-- Resale of reserved time (issue 15). The holder of a paid reservation
-- lists its remaining time from the whole hour from_at to its end, for all
-- its pieces, at price_cents. state: open, withdrawn, sold. (A listing
-- lapses without a write: it is open only while from_at is ahead and the
-- reservation is confirmed or active — market.ListingOpen.)
--
-- A sale creates the buyer's reservation (reservations.resale_of names the
-- original; its pieces are the original's from from_at, with amount 0: the
-- original keeps settling the provider for the whole time) and sets
-- reservations.resold_at on the original (the seller's access ends there).
-- charge_ref is the buyer's payment (payment intent); fee_cents the
-- platform's fee; credit_cents (price − fee) is refunded to the seller's
-- original payment by the retrier: credit_done, credit_ref, attempts,
-- next_attempt_at, last_error as in settlements.
CREATE TABLE resale_listings (
    id              INTEGER PRIMARY KEY,
    reservation_id  INTEGER NOT NULL REFERENCES reservations (id),
    seller_id       INTEGER NOT NULL REFERENCES users (id),
    from_at         INTEGER NOT NULL,
    price_cents     INTEGER NOT NULL,
    state           TEXT    NOT NULL,
    buyer_id        INTEGER REFERENCES users (id),
    sold_reservation_id INTEGER REFERENCES reservations (id),
    charge_ref      TEXT    NOT NULL DEFAULT '',
    fee_cents       INTEGER NOT NULL DEFAULT 0,
    credit_cents    INTEGER NOT NULL DEFAULT 0,
    credit_done     INTEGER NOT NULL DEFAULT 0,
    credit_ref      TEXT    NOT NULL DEFAULT '',
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT    NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    sold_at         INTEGER,
    -- SLA credits for incidents in the resold hours, settled with the
    -- original reservation and refunded to the buyer's payment (charge_ref).
    sla_credit_cents INTEGER NOT NULL DEFAULT 0,
    sla_credit_done  INTEGER NOT NULL DEFAULT 1,
    sla_credit_ref   TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX resale_listings_reservation ON resale_listings (reservation_id, state);
CREATE INDEX resale_listings_state ON resale_listings (state, from_at);
-- At most one sale per reservation: the time is sold once.
CREATE UNIQUE INDEX resale_listings_sold ON resale_listings (reservation_id) WHERE state = 'sold';

ALTER TABLE reservations ADD COLUMN resale_of INTEGER REFERENCES reservations (id);
ALTER TABLE reservations ADD COLUMN resold_at INTEGER;
CREATE INDEX reservations_resale_of ON reservations (resale_of) WHERE resale_of IS NOT NULL;

-- A buyer's payment for a listing that was sold to someone else (or
-- withdrawn) between the charge and the sale: refunded in full, at once or
-- by the retrier (state pending, then refunded).
CREATE TABLE resale_refunds (
    id                INTEGER PRIMARY KEY,
    listing_id        INTEGER NOT NULL REFERENCES resale_listings (id),
    reservation_id    INTEGER NOT NULL REFERENCES reservations (id),
    buyer_id          INTEGER NOT NULL REFERENCES users (id),
    payment_intent_id TEXT    NOT NULL UNIQUE,
    amount_cents      INTEGER NOT NULL,
    state             TEXT    NOT NULL,
    refund_ref        TEXT    NOT NULL DEFAULT '',
    attempts          INTEGER NOT NULL DEFAULT 0,
    next_attempt_at   INTEGER NOT NULL,
    last_error        TEXT    NOT NULL DEFAULT '',
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL
);
CREATE INDEX resale_refunds_due ON resale_refunds (state, next_attempt_at);

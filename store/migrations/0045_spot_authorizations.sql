-- Spot authorisations (issue 22, docs/spot.md): before an offer-hour is
-- cleared, each live bid competing for it has its maximum for the hour held
-- on the buyer's default saved card (a payment with manual capture); only
-- bids whose hold succeeded enter the clearing. A winner's charge intent
-- captures its hold (charge_intents.authorized = 1, payment_intent_id the
-- hold); every other hold is released.
--
-- state: pending (recorded before the processor call, key
-- market.SpotAuthorization.Key), authorized, declined (the bank refused,
-- or no saved card: payment_method_id NULL), awarded (the bid won),
-- released (the hold was cancelled).
CREATE TABLE spot_authorizations (
    id                 INTEGER PRIMARY KEY,
    bid_id             INTEGER NOT NULL REFERENCES spot_bids (id),
    offer_id           INTEGER NOT NULL REFERENCES offers (id),
    hour               INTEGER NOT NULL,
    buyer_id           INTEGER NOT NULL REFERENCES users (id),
    payment_method_id  INTEGER REFERENCES payment_methods (id),
    amount_cents       INTEGER NOT NULL,
    state              TEXT    NOT NULL,
    payment_intent_id  TEXT    NOT NULL DEFAULT '',
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL
);
CREATE UNIQUE INDEX spot_authorizations_bid_hour ON spot_authorizations (bid_id, hour);
CREATE INDEX spot_authorizations_hour ON spot_authorizations (offer_id, hour, state);
CREATE INDEX spot_authorizations_state ON spot_authorizations (state, hour);

ALTER TABLE charge_intents ADD COLUMN authorized INTEGER NOT NULL DEFAULT 0;

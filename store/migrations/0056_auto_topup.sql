-- Automatic top-up of a prepaid balance (docs/metered.md): below
-- threshold_cents the background work tops the balance up by amount_cents
-- from the buyer's saved card. paused_reason: set when the card was
-- declined, cleared when the buyer changes the setting or tops up by hand.
CREATE TABLE balance_auto_topup (
    buyer_id        INTEGER PRIMARY KEY REFERENCES users (id),
    threshold_cents INTEGER NOT NULL CHECK (threshold_cents > 0),
    amount_cents    INTEGER NOT NULL CHECK (amount_cents > 0),
    paused_reason   TEXT    NOT NULL DEFAULT '',
    updated_at      INTEGER NOT NULL
);

-- At most one automatic top-up in flight per buyer, whichever replica or
-- restarted process records it.
CREATE UNIQUE INDEX balance_topups_one_auto ON balance_topups (buyer_id) WHERE method = 'auto' AND state = 'pending';

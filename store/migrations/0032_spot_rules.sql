-- Spot rules (issue 22, docs/spot.md): a bid needs a default saved card
-- that was saved (its setup verified it: created_at) or succeeded in a
-- charge within market.SpotCardRecency. last_charged_at is when an
-- off-session charge of the card last succeeded (Unix seconds; NULL:
-- never).
ALTER TABLE payment_methods ADD COLUMN last_charged_at INTEGER;

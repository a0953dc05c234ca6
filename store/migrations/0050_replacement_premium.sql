-- A dearer replacement's buyer share, charged off-session to the buyer's
-- saved card before the replacement is booked (issue 26,
-- docs/replacement.md). The decision records the plan and a pending
-- charge intent in one transaction (state 'charging'); the booking is
-- made in the transaction that records the paid charge, and finishes the
-- intent. charge_intent_id names that intent (0: none), planned_pieces the
-- planned pieces (market.ReservationPiece, JSON) to book once paid,
-- premium_ref the processor's payment of the share — refunded in full,
-- with refund_cents, when the plan could no longer be booked.
ALTER TABLE replacements ADD COLUMN charge_intent_id INTEGER NOT NULL DEFAULT 0;
ALTER TABLE replacements ADD COLUMN planned_pieces TEXT NOT NULL DEFAULT '';
ALTER TABLE replacements ADD COLUMN premium_ref TEXT NOT NULL DEFAULT '';
CREATE INDEX replacements_charge_intent ON replacements (charge_intent_id);

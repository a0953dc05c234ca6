-- The contract is what was booked: each piece keeps the settlement terms
-- of its offer as they stood when it was booked (as it already keeps the
-- cancellation policy), so a provider who edits an offer later does not
-- change how reservations already sold are settled. The credit schedule is
-- the offer's tiers in order, as JSON ([{"below_bp":…,"credit_bp":…}]).
ALTER TABLE reservation_pieces ADD COLUMN billing_basis TEXT NOT NULL DEFAULT '';
ALTER TABLE reservation_pieces ADD COLUMN uptime_bp INTEGER NOT NULL DEFAULT 0;
ALTER TABLE reservation_pieces ADD COLUMN credit_cap_bp INTEGER NOT NULL DEFAULT 0;
ALTER TABLE reservation_pieces ADD COLUMN credit_schedule_json TEXT NOT NULL DEFAULT '[]';

-- Pieces booked before this migration did not record their terms; the
-- offer's current terms are the best record there is.
UPDATE reservation_pieces SET
    billing_basis = (SELECT o.billing_basis FROM offers o WHERE o.id = reservation_pieces.offer_id),
    uptime_bp = (SELECT o.uptime_bp FROM offers o WHERE o.id = reservation_pieces.offer_id),
    credit_cap_bp = (SELECT o.credit_cap_bp FROM offers o WHERE o.id = reservation_pieces.offer_id),
    credit_schedule_json = (
        SELECT json_group_array(json_object('below_bp', t.below_bp, 'credit_bp', t.credit_bp) ORDER BY t.position)
        FROM offer_credit_tiers t WHERE t.offer_id = reservation_pieces.offer_id);

-- Each offer's SLA credit schedule as the JSON a booked piece freezes
-- (market.CreditTier in tier order, as 0008_piece_terms.sql wrote it),
-- one row per offer with tiers. The booking reads it from here so the
-- booking's SQL is the same on both engines; PostgreSQL defines the view
-- with its own JSON functions (migrations/postgres/0019_credit_schedules.sql).
CREATE VIEW offer_credit_schedules AS
    SELECT t.offer_id AS offer_id,
           json_group_array(json_object('below_bp', t.below_bp, 'credit_bp', t.credit_bp) ORDER BY t.position) AS schedule_json
    FROM offer_credit_tiers t
    GROUP BY t.offer_id;

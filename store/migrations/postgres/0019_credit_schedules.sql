-- PostgreSQL's form of 0019's view: the same JSON array of tiers in order.
CREATE VIEW offer_credit_schedules AS
    SELECT t.offer_id AS offer_id,
           json_agg(json_build_object('below_bp', t.below_bp, 'credit_bp', t.credit_bp) ORDER BY t.position)::text AS schedule_json
    FROM offer_credit_tiers t
    GROUP BY t.offer_id;

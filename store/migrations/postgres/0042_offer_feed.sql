-- Each offer change is noted, beside its NOTIFY to every replica, in one
-- of two transaction-local settings (ids, each followed by a comma):
-- gpumarket.changed_listings when the offer's listing changed (the offer,
-- its tiers, its provider's suspension, an interruptible piece, whose
-- payment moves the spot price quotes use), gpumarket.changed_commitments
-- when only its commitments did (a piece, or its reservation's state).
-- The writer reads them just before COMMIT and hands them to its own
-- process once the commit succeeds (store/feed.go): the replica that wrote
-- hears its change before the write returns, not when the NOTIFY comes
-- back. A local setting ends with its transaction, and a savepoint rolled
-- back restores it, so what rolls back is never heard. An update that
-- moves a child row to another offer names both offers.
CREATE OR REPLACE FUNCTION notify_offer_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r record;
    listings bigint[] := '{}';
    commitments bigint[] := '{}';
BEGIN
    IF TG_OP = 'DELETE' THEN
        r := OLD;
    ELSE
        r := NEW;
    END IF;
    IF TG_TABLE_NAME = 'offers' THEN
        listings := ARRAY[r.id];
    ELSIF TG_TABLE_NAME = 'users' THEN
        listings := ARRAY(SELECT o.id FROM offers o WHERE o.provider_id = r.id);
    ELSIF TG_TABLE_NAME = 'reservations' THEN
        listings := ARRAY(SELECT p.offer_id FROM reservation_pieces p WHERE p.reservation_id = r.id AND p.interruptible <> 0);
        commitments := ARRAY(SELECT p.offer_id FROM reservation_pieces p WHERE p.reservation_id = r.id AND p.interruptible = 0);
    ELSIF TG_TABLE_NAME = 'offer_credit_tiers' THEN
        listings := ARRAY[r.offer_id];
        IF TG_OP = 'UPDATE' THEN
            listings := listings || OLD.offer_id;
        END IF;
    ELSE
        IF r.interruptible <> 0 THEN
            listings := ARRAY[r.offer_id];
        ELSE
            commitments := ARRAY[r.offer_id];
        END IF;
        IF TG_OP = 'UPDATE' THEN
            IF OLD.interruptible <> 0 THEN
                listings := listings || OLD.offer_id;
            ELSE
                commitments := commitments || OLD.offer_id;
            END IF;
        END IF;
    END IF;
    PERFORM pg_notify('gpumarket_offers', id::text) FROM (SELECT DISTINCT unnest(listings || commitments) AS id) AS ids;
    IF cardinality(listings) > 0 THEN
        PERFORM set_config('gpumarket.changed_listings',
            coalesce(current_setting('gpumarket.changed_listings', true), '') || array_to_string(listings, ',') || ',', true);
    END IF;
    IF cardinality(commitments) > 0 THEN
        PERFORM set_config('gpumarket.changed_commitments',
            coalesce(current_setting('gpumarket.changed_commitments', true), '') || array_to_string(commitments, ',') || ',', true);
    END IF;
    RETURN NULL;
END
$$;

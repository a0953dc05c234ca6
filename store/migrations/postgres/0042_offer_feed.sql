-- Each offer change is noted, beside its NOTIFY to every replica, in the
-- transaction-local setting gpumarket.changed_offers (ids, each followed
-- by a comma), which the writer reads just before COMMIT and hands to its
-- own process once the commit succeeds (store/feed.go): the replica that
-- wrote hears its change before the write returns, not when the NOTIFY
-- comes back. A local setting ends with its transaction, and a savepoint
-- rolled back restores it, so what rolls back is never heard. An update
-- that moves a child row to another offer names both offers.
CREATE OR REPLACE FUNCTION notify_offer_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r record;
    ids bigint[];
BEGIN
    IF TG_OP = 'DELETE' THEN
        r := OLD;
    ELSE
        r := NEW;
    END IF;
    IF TG_TABLE_NAME = 'offers' THEN
        ids := ARRAY[r.id];
    ELSIF TG_TABLE_NAME = 'users' THEN
        ids := ARRAY(SELECT o.id FROM offers o WHERE o.provider_id = r.id);
    ELSIF TG_TABLE_NAME = 'reservations' THEN
        ids := ARRAY(SELECT p.offer_id FROM reservation_pieces p WHERE p.reservation_id = r.id);
    ELSE
        ids := ARRAY[r.offer_id];
        IF TG_OP = 'UPDATE' THEN
            IF OLD.offer_id IS DISTINCT FROM NEW.offer_id THEN
                ids := ids || OLD.offer_id;
            END IF;
        END IF;
    END IF;
    IF cardinality(ids) > 0 THEN
        PERFORM pg_notify('gpumarket_offers', id::text) FROM unnest(ids) AS id;
        PERFORM set_config('gpumarket.changed_offers',
            coalesce(current_setting('gpumarket.changed_offers', true), '') || array_to_string(ids, ',') || ',', true);
    END IF;
    RETURN NULL;
END
$$;

-- A host token revoked is a change of its offer's commitments on the feed
-- (NOTIFY gpumarket_offers, and the writer's own process before the write
-- returns): each replica's cache of authenticated host tokens and of the
-- agents' assignments (workflow/agentcache.go) drops the offer's entries.
-- The function is 0042's with the host_tokens branch added.
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
    ELSIF TG_TABLE_NAME = 'host_tokens' THEN
        commitments := ARRAY[r.offer_id];
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

CREATE TRIGGER host_tokens_revoked AFTER UPDATE OF revoked_at ON host_tokens
    FOR EACH ROW WHEN (OLD.revoked_at IS DISTINCT FROM NEW.revoked_at) EXECUTE FUNCTION notify_offer_change();

-- NOTIFY is transactional: the ids reach listeners when the transaction
-- commits, and never when it rolls back; repeats within one transaction
-- are sent once.
CREATE FUNCTION notify_offer_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    IF TG_OP = 'DELETE' THEN
        r := OLD;
    ELSE
        r := NEW;
    END IF;
    IF TG_TABLE_NAME = 'offers' THEN
        PERFORM pg_notify('gpumarket_offers', r.id::text);
    ELSIF TG_TABLE_NAME = 'users' THEN
        PERFORM pg_notify('gpumarket_offers', o.id::text) FROM offers o WHERE o.provider_id = r.id;
    ELSIF TG_TABLE_NAME = 'reservations' THEN
        PERFORM pg_notify('gpumarket_offers', p.offer_id::text) FROM reservation_pieces p WHERE p.reservation_id = r.id;
    ELSE
        PERFORM pg_notify('gpumarket_offers', r.offer_id::text);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER offers_changed AFTER INSERT OR UPDATE OR DELETE ON offers
    FOR EACH ROW EXECUTE FUNCTION notify_offer_change();
CREATE TRIGGER offer_credit_tiers_changed AFTER INSERT OR UPDATE OR DELETE ON offer_credit_tiers
    FOR EACH ROW EXECUTE FUNCTION notify_offer_change();
CREATE TRIGGER reservation_pieces_changed AFTER INSERT OR UPDATE OR DELETE ON reservation_pieces
    FOR EACH ROW EXECUTE FUNCTION notify_offer_change();
CREATE TRIGGER reservations_state_changed AFTER UPDATE OF state ON reservations
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION notify_offer_change();
CREATE TRIGGER users_suspension_changed AFTER UPDATE OF suspended ON users
    FOR EACH ROW WHEN (OLD.suspended IS DISTINCT FROM NEW.suspended) EXECUTE FUNCTION notify_offer_change();

-- The balance ledger is append-only on PostgreSQL too (the SQLite
-- triggers of 0046_metered.sql; the function is 0003_billing.sql's).
CREATE TRIGGER balance_entries_append_only BEFORE UPDATE OR DELETE ON balance_entries
    FOR EACH ROW EXECUTE FUNCTION refuse_append_only_change();
CREATE TRIGGER balance_entries_no_truncate BEFORE TRUNCATE ON balance_entries
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_append_only_change();

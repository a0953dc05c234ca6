-- PostgreSQL's form of 0005's append-only audit trail: UPDATE, DELETE and
-- TRUNCATE of audit_log are refused (refuse_append_only_change is 0003's).
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION refuse_append_only_change();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_append_only_change();

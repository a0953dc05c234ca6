-- Admin: audit trail, in-app notifications, reservations flagged for review.
-- Same conventions as 0001: times INTEGER unix seconds UTC, ids INTEGER.

-- The audit trail: every admin action and every movement of money, with who
-- did it (actor_id NULL for the system), what it touched and the state
-- before and after (JSON). Append only: the triggers below refuse any
-- UPDATE or DELETE, whatever the code above tries.
CREATE TABLE audit_log (
    id           INTEGER PRIMARY KEY,
    at           INTEGER NOT NULL,
    actor_id     INTEGER REFERENCES users (id),
    action       TEXT    NOT NULL,  -- e.g. "offer.approve", "provider.suspend", "refund"
    subject_kind TEXT    NOT NULL,  -- "offer", "user", "reservation", "dispute", ...
    subject_id   INTEGER NOT NULL,
    before_json  TEXT    NOT NULL DEFAULT '',
    after_json   TEXT    NOT NULL DEFAULT '',
    note         TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX audit_log_at ON audit_log (at, id);
CREATE INDEX audit_log_subject ON audit_log (subject_kind, subject_id, at);
CREATE INDEX audit_log_actor ON audit_log (actor_id, at);

CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;

CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;

-- In-app notifications: one row per message to one user; read_at NULL
-- while unread.
CREATE TABLE notifications (
    id         INTEGER PRIMARY KEY,
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    kind       TEXT    NOT NULL,
    message    TEXT    NOT NULL,
    url        TEXT    NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    read_at    INTEGER
);
CREATE INDEX notifications_user ON notifications (user_id, created_at);
CREATE INDEX notifications_unread ON notifications (user_id) WHERE read_at IS NULL;

-- Reservations an admin must look at, e.g. those of a provider who was
-- suspended while they were open. cleared_at is set when an admin has.
CREATE TABLE reservation_flags (
    id             INTEGER PRIMARY KEY,
    reservation_id INTEGER NOT NULL REFERENCES reservations (id) ON DELETE CASCADE,
    reason         TEXT    NOT NULL,
    created_by     INTEGER REFERENCES users (id),
    created_at     INTEGER NOT NULL,
    cleared_by     INTEGER REFERENCES users (id),
    cleared_at     INTEGER
);
CREATE INDEX reservation_flags_open ON reservation_flags (reservation_id) WHERE cleared_at IS NULL;

-- Why a provider is suspended, shown to admins.
CREATE TABLE provider_suspensions (
    user_id      INTEGER PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    reason       TEXT    NOT NULL,
    suspended_by INTEGER REFERENCES users (id),
    suspended_at INTEGER NOT NULL
);

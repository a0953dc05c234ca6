-- Outgoing e-mail. Every message is queued in the transaction of the event
-- that causes it (a notification, a reset link), so a crash never loses
-- one; the background loop sends what is due and marks it sent, retrying
-- with backoff. kind: a notification kind (store.Notify*) or a security
-- kind (verification, reset, sign-in method), which cannot be turned off.
-- url_path: the link in the message, relative to the server's base URL
-- (added when it is sent). sent_at NULL while unsent.
CREATE TABLE mail_outbox (
    id              INTEGER PRIMARY KEY,
    user_id         INTEGER REFERENCES users (id) ON DELETE SET NULL,
    to_addr         TEXT    NOT NULL,
    kind            TEXT    NOT NULL,
    subject         TEXT    NOT NULL,
    body            TEXT    NOT NULL,
    url_path        TEXT    NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    next_attempt_at INTEGER NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT    NOT NULL DEFAULT '',
    sent_at         INTEGER
);
CREATE INDEX mail_outbox_due ON mail_outbox (sent_at, next_attempt_at);
CREATE INDEX mail_outbox_user ON mail_outbox (user_id, created_at);

-- Which notification kinds a person does not want by e-mail (a row per
-- kind turned off; no row means on). Security mail is never looked up here.
CREATE TABLE mail_opt_outs (
    user_id INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    kind    TEXT    NOT NULL,
    PRIMARY KEY (user_id, kind)
);

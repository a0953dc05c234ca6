-- Two-factor sign-in (TOTP, RFC 6238). One row per account that has set
-- it up or is setting it up: secret is the shared secret sealed by the
-- server (AES-GCM under a key derived from the session key; the database
-- alone does not reveal it); enabled_at NULL while the person has not yet
-- confirmed a code (setup in progress). last_step: the last time step
-- (unix seconds / 30) whose code was accepted; a code for that step or an
-- earlier one is refused, so a code cannot be replayed.
CREATE TABLE user_totp (
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    secret     BLOB    NOT NULL,
    created_at INTEGER NOT NULL,
    enabled_at INTEGER,
    last_step  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (user_id)
);

-- Single-use recovery codes, shown once when two-factor sign-in is turned
-- on: only their SHA-256 (salted with the account id) is kept. used_at
-- NULL while unused.
CREATE TABLE recovery_codes (
    id        INTEGER PRIMARY KEY,
    user_id   INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    code_hash TEXT    NOT NULL,
    used_at   INTEGER,
    UNIQUE (user_id, code_hash)
);

-- A login half done: the password was right and the account asks for a
-- second factor. Not a session: it grants nothing but the right to enter a
-- code, for a few minutes. id_hash: SHA-256 of the raw id the browser holds
-- in a cookie; next: where to go once signed in.
CREATE TABLE login_challenges (
    id_hash    TEXT    PRIMARY KEY,
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    next_path  TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX login_challenges_user ON login_challenges (user_id);

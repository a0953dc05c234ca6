-- Confirmed e-mail addresses and the single-use links mailed for them.
-- email_verified_at: when the owner followed the link mailed to the
-- address (NULL while unconfirmed). Accounts that existed before count as
-- confirmed, so nothing they did before stops working.
ALTER TABLE users ADD COLUMN email_verified_at INTEGER;
UPDATE users SET email_verified_at = created_at;

-- A link mailed to an address: purpose 'verify' (the address given at
-- sign-up), 'reset' (set a new password) or 'address' (confirm a new
-- address). Only the SHA-256 of the token in the link is kept. email is
-- the address the link was sent to, which it confirms; used_at is set when
-- it is used (once), NULL until then.
CREATE TABLE account_links (
    id         INTEGER PRIMARY KEY,
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    purpose    TEXT    NOT NULL,
    token_hash TEXT    NOT NULL UNIQUE,
    email      TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    used_at    INTEGER
);
CREATE INDEX account_links_user ON account_links (user_id, purpose);

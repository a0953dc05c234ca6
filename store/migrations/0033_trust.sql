-- Issue 23. reject_founded: whether a rejected reservation failed its
-- contract (a failed acceptance test or a measured outage: refunded in
-- full) or not (the buyer paid the minutes used); unfounded rejections are
-- counted per buyer and limited (market.RejectLimit, docs/rejection.md).
ALTER TABLE reservations ADD COLUMN reject_founded INTEGER NOT NULL DEFAULT 0;

-- The market's own up-time (docs/agent.md): each server process records
-- when it started and, every store.ServerBeatInterval, that it is still
-- up. A node's silence counts as a host failure only while the market was
-- up and reachable.
CREATE TABLE server_runs (
    replica    TEXT    NOT NULL,
    started_at INTEGER NOT NULL,
    seen_at    INTEGER NOT NULL,
    PRIMARY KEY (replica, started_at)
);
CREATE INDEX server_runs_seen ON server_runs (seen_at);

-- Attempts at a second factor in the account's current window (issue 23):
-- counted by one conditional UPDATE (store.TakeCodeAttempt), so that
-- simultaneous wrong codes cannot all pass the limit.
ALTER TABLE user_totp ADD COLUMN code_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE user_totp ADD COLUMN code_window_start INTEGER NOT NULL DEFAULT 0;

-- How each node's agent keeps renters of pieces without a container apart
-- (issue 25, docs/agent.md "Which mode isolates what"), from its latest
-- heartbeat: market.Isolation (rental_users, shared_user, provider_hooks;
-- '' from an agent that does not say). An offer with a node reporting
-- shared_user shows "shared host user" whatever its provider declared.
ALTER TABLE hosts ADD COLUMN isolation TEXT NOT NULL DEFAULT '';

-- A standing order's runtime with its secrets (the order's request_json is
-- the portable form, without them), copied to the reservation of its fill.
CREATE TABLE standing_order_runtimes (
    order_id     INTEGER PRIMARY KEY REFERENCES standing_orders (id),
    runtime_json TEXT    NOT NULL
);

-- What the agent reported when it could not end a piece's access on a node
-- (its keys, or with -rental-users its Unix user and processes): '' when
-- nothing failed, cleared by the "removed" report. Listed for the admins
-- and told to the provider.
ALTER TABLE piece_access ADD COLUMN remove_error TEXT NOT NULL DEFAULT '';
ALTER TABLE piece_access ADD COLUMN remove_error_at INTEGER NOT NULL DEFAULT 0;

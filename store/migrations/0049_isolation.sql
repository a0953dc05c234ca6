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

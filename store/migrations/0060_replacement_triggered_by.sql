-- Replacement, third part (issue 26, docs/replacement.md): an admin's
-- trigger of a replacement from an incident records who triggered it, on
-- the row (triggered_by, NULL when the agent's measurement did) and in the
-- audit trail (action replacement.trigger), in the transaction that
-- records the decision.
ALTER TABLE replacements ADD COLUMN triggered_by INTEGER REFERENCES users (id);

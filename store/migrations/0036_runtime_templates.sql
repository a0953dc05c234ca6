-- Issue 25: runtimes saved under a name (templates, docs/runtime.md).
-- runtime_json is market.EncodeRuntimeStored (secrets included, sent
-- only to the author's own rentals); author_id 0-free: demo templates
-- belong to the demo's admin. used_by counts reservations booked with it.
CREATE TABLE runtime_templates (
    id           INTEGER PRIMARY KEY,
    author_id    INTEGER NOT NULL REFERENCES users (id),
    name         TEXT    NOT NULL,
    description  TEXT    NOT NULL,
    public       INTEGER NOT NULL,
    runtime_json TEXT    NOT NULL,
    used_by      INTEGER NOT NULL DEFAULT 0,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    UNIQUE (author_id, name)
);
CREATE INDEX runtime_templates_public ON runtime_templates (public, used_by);

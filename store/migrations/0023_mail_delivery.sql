-- A message the sender gave up on (too many failed attempts, or too old
-- when first tried): failed_at is when; it is no longer due, and an admin
-- may queue it again. NULL while it is sent or still being tried.
ALTER TABLE mail_outbox ADD COLUMN failed_at INTEGER;

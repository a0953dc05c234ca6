-- Issue 27: the background lease is a fencing token. generation counts the
-- lease's acquisitions: it goes up each time the lease is taken while free,
-- expired or held by another (store.TakeLease), never on a renewal. Work
-- done under the lease carries the generation it was taken with
-- (store.WithFence) and its write transactions are refused once the lease
-- has been taken again or has expired.
ALTER TABLE leases ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;

-- Extending a running reservation (issue 17) books the same pieces again
-- from where they end as a new reservation, held until paid like any
-- booking; extends_id names the reservation it continues (NULL for a
-- booking from a quote).
ALTER TABLE reservations ADD COLUMN extends_id INTEGER REFERENCES reservations (id);
CREATE INDEX reservations_extends ON reservations (extends_id) WHERE extends_id IS NOT NULL;

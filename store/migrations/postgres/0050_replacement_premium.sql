-- The rebuilt table keeps its rows' ids: the identity goes on after them.
SELECT setval(pg_get_serial_sequence('replacements', 'id'), COALESCE((SELECT MAX(id) FROM replacements), 0) + 1, false);

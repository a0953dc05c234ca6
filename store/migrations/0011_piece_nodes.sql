-- Capacity lives on nodes (issue 10): each piece records which of its
-- offer's nodes serve it, so bookings are checked node by node and the
-- provider's agent on each node knows whom it serves.
--
-- gang: 1 when the piece's devices are tightly coupled (a training job):
-- on one node, or on whole nodes of a placement group.
-- nodes: the devices held on each node, as "node:devices" pairs joined by
-- commas, nodes numbered from 0 (e.g. "3:2", "0:8,1:8"); a gang larger
-- than a node holds each of its nodes whole. Never empty once this
-- migration has run.
ALTER TABLE reservation_pieces ADD COLUMN gang INTEGER NOT NULL DEFAULT 0;
ALTER TABLE reservation_pieces ADD COLUMN nodes TEXT NOT NULL DEFAULT '';

-- Pieces booked before did not record coupling; the request they answered
-- did (a training request is a gang).
UPDATE reservation_pieces SET gang = 1 WHERE reservation_id IN (
    SELECT r.id FROM reservations r
    WHERE CASE WHEN json_valid(r.request_json) THEN json_extract(r.request_json, '$.workload.kind') END = 'training');

-- Their nodes are set in the same transaction by placeRecordedPieces
-- (store/nodes.go): each offer's pieces replayed in id order, each placed
-- by market.PlaceCommitments beside the earlier ones that were not
-- cancelled or expired — the placement the booking would have made. A
-- piece that cannot be placed validly so (booked under the old pool rule:
-- a gang over two part-free nodes, or overlapping history) is recorded
-- spread over the nodes with the most free devices, or if even that does
-- not fit, packed from node 0; such a record may overcommit a node, which
-- only makes later bookings on that node at that time refuse.

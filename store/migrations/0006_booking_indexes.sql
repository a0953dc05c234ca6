-- Booking throughput: every index on reservation_pieces is one more B-tree
-- page written per booking. The provider's dashboard now finds its pieces
-- through its offers (offers_provider, then reservation_pieces_offer), so
-- the index on the pieces' provider is not used by any query.
DROP INDEX IF EXISTS reservation_pieces_provider;

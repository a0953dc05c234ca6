package workflow

import (
	"context"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// SaveRequest keeps a buyer's request under a name, as its portable JSON
// (market.EncodeRequestJSON), to open again later.
func (s *Service) SaveRequest(ctx context.Context, buyerID int64, name string, req market.Request) (store.SavedRequest, error) {
	b, err := market.EncodeRequestJSON(req)
	if err != nil {
		return store.SavedRequest{}, err
	}
	return s.db.SaveRequest(ctx, buyerID, name, string(b), s.now())
}

// DeleteSavedRequest deletes one of the buyer's saved requests.
func (s *Service) DeleteSavedRequest(ctx context.Context, buyerID, id int64) error {
	return s.db.DeleteSavedRequest(ctx, buyerID, id)
}

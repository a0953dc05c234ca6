package workflow

import (
	"context"

	"github.com/gpumarket/gpumarket/store"
)

// CreateHostToken issues the token of one node of the provider's offer
// (store.CreateHostToken: the node's previous live token is revoked in the
// same transaction) and returns it with the raw token, shown only once.
func (s *Service) CreateHostToken(ctx context.Context, providerID, offerID int64, node int) (store.HostToken, string, error) {
	tok, raw, err := s.db.CreateHostToken(ctx, providerID, offerID, node, s.now())
	if err != nil {
		return store.HostToken{}, "", err
	}
	s.log.Info("host token created", "provider_id", providerID, "offer_id", offerID, "node", tok.Node, "token_id", tok.ID)
	return tok, raw, nil
}

package workflow

import (
	"context"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// CreateHostToken makes the token an agent on one node of the provider's
// offer authenticates with, revoking the node's previous one; the raw
// token is returned once and stored only as a hash.
func (s *Service) CreateHostToken(ctx context.Context, providerID, offerID int64, node int) (store.HostToken, string, error) {
	tok, raw, err := s.db.CreateHostToken(ctx, providerID, offerID, node, s.now())
	if err != nil {
		return store.HostToken{}, "", err
	}
	s.log.Info("host token created", "offer_id", offerID, "node", tok.Node, "token_id", tok.ID)
	return tok, raw, nil
}

// RevokeHostToken revokes one of the provider's host tokens: the agent
// using it is refused from then on.
func (s *Service) RevokeHostToken(ctx context.Context, providerID, tokenID int64) error {
	if err := s.db.RevokeHostToken(ctx, providerID, tokenID, s.now()); err != nil {
		return err
	}
	s.log.Info("host token revoked", "token_id", tokenID)
	return nil
}

// Authenticate finds the account a personal API token belongs to, on
// every request, so revocation and suspension take effect at once. The
// token's use is noted in memory and written with others off the request
// (FlushTokenUses).
func (s *Service) Authenticate(ctx context.Context, rawToken string) (store.APIToken, market.User, error) {
	tok, u, err := s.db.FindAPIToken(ctx, rawToken)
	if err != nil {
		return store.APIToken{}, market.User{}, err
	}
	s.tokenUses.note(tok, s.now())
	return tok, u, nil
}

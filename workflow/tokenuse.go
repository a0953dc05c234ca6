package workflow

import (
	"context"
	"sync"
	"time"

	"github.com/gpumarket/gpumarket/store"
)

// An API token's last use (shown on the account page) is kept in memory
// as requests authenticate and written in one batch every round of the
// background loop, and on its way out (Run): a request never waits for
// the single writer to record it. A token is noted only when its recorded
// use is tokenUseRecording old, and then at most once a second, so a
// client's stream of requests costs one map look-up each, and the
// database one write per token a minute.
const tokenUseRecording = time.Minute

// tokenUses are the uses noted and not yet written: token id → latest use.
type tokenUses struct{ pending sync.Map }

// note notes that tok was used at now.
func (t *tokenUses) note(tok store.APIToken, now time.Time) {
	if !tok.LastUsedAt.IsZero() && now.Sub(tok.LastUsedAt) < tokenUseRecording {
		return
	}
	if v, ok := t.pending.Load(tok.ID); ok && now.Sub(v.(time.Time)) < time.Second {
		return
	}
	t.pending.Store(tok.ID, now)
}

// FlushTokenUses writes the API tokens' uses noted so far
// (store.RecordAPITokenUses). The background loop of every replica calls
// it every round and on the way out. A use noted while the batch is
// written stays for the next; a batch that fails is tried again then.
func (s *Service) FlushTokenUses(ctx context.Context) {
	var batch []store.APITokenUse
	s.tokenUses.pending.Range(func(k, v any) bool {
		batch = append(batch, store.APITokenUse{TokenID: k.(int64), At: v.(time.Time)})
		return true
	})
	if len(batch) == 0 {
		return
	}
	if err := s.db.RecordAPITokenUses(ctx, batch); err != nil {
		s.log.Error("API tokens' last uses not written; tried again next round", "tokens", len(batch), "err", err)
		return
	}
	for _, u := range batch {
		s.tokenUses.pending.CompareAndDelete(u.TokenID, u.At)
	}
}

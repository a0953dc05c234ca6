package web

import (
	"testing"

	"github.com/gpumarket/gpumarket/market"
)

// TestRequestSummaryNamesAPinnedOffer: an order pinned to offers says so,
// not "any accelerator".
func TestRequestSummaryNamesAPinnedOffer(t *testing.T) {
	r := market.Request{Workload: market.Workload{Devices: 1, Kind: market.WorkBatch, Hours: 2}}
	if got, want := requestSummary(r), "1 × any accelerator, batch, 2 hours"; got != want {
		t.Errorf("unpinned: %q, want %q", got, want)
	}
	r.Constraints.OfferIDs = []int64{7, 9}
	if got, want := requestSummary(r), "1 × offer #7 or #9, batch, 2 hours"; got != want {
		t.Errorf("pinned: %q, want %q", got, want)
	}
}

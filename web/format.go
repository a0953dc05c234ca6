package web

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// formatDate shows a UTC date, e.g. "3 Dec 2026" (market.FormatDate: the
// one date format of pages and messages).
func formatDate(t time.Time) string { return market.FormatDate(t) }

// formatTime shows a UTC instant, e.g. "3 Dec 2026 14:00 UTC"
// (market.FormatTime).
func formatTime(t time.Time) string { return market.FormatTime(t) }

// formatSpan shows [start, end) as two instants (market.FormatSpan).
func formatSpan(start, end time.Time) string { return market.FormatSpan(start, end) }

func yesNo(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}

func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "—"
	}
	return s
}

func stackName(a market.Accelerator) string {
	if a.Stack == "rocm" {
		return "ROCm"
	}
	return "CUDA"
}

// deviceLine is "8 × H100 80GB SXM".
func deviceLine(o market.Offer) string {
	return fmt.Sprintf("%d × %s", o.Devices(), o.Accelerator().Name)
}

// topologyLine is "1 node × 8, NVLink, no network".
func topologyLine(o market.Offer) string {
	s := fmt.Sprintf("%d node(s) × %d, %s", o.Nodes, o.DevicesPerNode, o.Interconnect.Label())
	if o.Nodes > 1 {
		s += ", " + o.Network().Label
		if o.PlacementGroup {
			s += ", one placement group"
		}
	}
	return s
}

// offerSummary is a one-line description for lists.
func offerSummary(o market.Offer) string {
	return deviceLine(o) + " · " + topologyLine(o) + " · " + o.Region().Name
}

func creditScheduleText(tiers []market.CreditTier) string {
	if len(tiers) == 0 {
		return "No credits"
	}
	parts := make([]string, len(tiers))
	for i, t := range tiers {
		parts[i] = fmt.Sprintf("below %s%% → %s%% credit", market.FormatPercentBP(t.BelowBP), market.FormatPercentBP(t.CreditBP))
	}
	return strings.Join(parts, "; ")
}

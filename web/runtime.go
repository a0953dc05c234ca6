package web

import (
	"context"
	"fmt"
	"strings"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
)

// runtimeAccess fills the reservation's environment (no secrets: the
// store removes their values) and returns its containers by piece and
// node; a reservation without a runtime has none.
func (h *Handler) runtimeAccess(ctx context.Context, buyerID int64, r market.Reservation, v *views.ReservationAccessView) (map[[2]int64]store.PieceContainer, error) {
	rt, err := h.db.FindReservationRuntime(ctx, buyerID, r.ID)
	if market.ErrorCode(err) == market.CodeNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	v.Image, v.Launch = rt.Image, string(rt.Launch)
	cs, err := h.db.ListReservationContainers(ctx, buyerID, r.ID)
	if err != nil {
		return nil, err
	}
	out := map[[2]int64]store.PieceContainer{}
	for _, c := range cs {
		out[[2]int64{c.PieceID, int64(c.Node)}] = c
	}
	return out, nil
}

// containerRow shows a node's container on its access row: "waiting" until
// its agent reports.
func containerRow(row *views.AccessRow, c store.PieceContainer) {
	if c.Phase == "" {
		return
	}
	row.Container, row.ContainerMessage = c.Phase.Label(), c.Message
	var ports []string
	for _, m := range c.Ports {
		ports = append(ports, fmt.Sprintf("%d → %d", m.Container, m.Host))
	}
	row.Ports = strings.Join(ports, ", ")
}

package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/agentapi"
	"github.com/gpumarket/gpumarket/market"
)

// agentContainerReply answers a container report.
type agentContainerReply struct {
	PieceID int64  `json:"piece_id"`
	Phase   string `json:"phase"`
	Devices []int  `json:"device_indices"`
}

// handleAgentContainer records where a piece's container stands on the
// token's node (workflow.RecordContainer; a failure before the end opens
// an incident). A piece not on the node is 404; one without a runtime 409.
func (h *Handler) handleAgentContainer(c echo.Context) error {
	id, err := pieceID(c)
	if err != nil {
		return err
	}
	var in agentapi.ContainerReport
	if err := decodeBody(c, &in); err != nil {
		return err
	}
	pc, err := h.wf.RecordContainer(c.Request().Context(), hostToken(c).ID, id,
		market.ContainerReport{Phase: market.ContainerPhase(in.Phase), Message: in.Message, Progress: in.Progress, Ports: in.Ports})
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, agentContainerReply{PieceID: pc.PieceID, Phase: string(pc.Phase), Devices: pc.Devices})
}

package workflow

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// Runtimes and templates (docs/runtime.md): a request's runtime travels
// with the booking; templates save one under a name; agents report each
// container's phase.

// SaveTemplate saves a runtime under a name for its author.
func (s *Service) SaveTemplate(ctx context.Context, authorID int64, t market.Template) (store.Template, error) {
	out, err := s.db.SaveTemplate(ctx, authorID, t, s.now())
	if err != nil {
		return store.Template{}, err
	}
	s.log.Info("template saved", "template_id", out.ID, "author_id", authorID, "public", out.Public)
	return out, nil
}

// UpdateTemplate edits an author's template.
func (s *Service) UpdateTemplate(ctx context.Context, authorID, id int64, t market.Template) (store.Template, error) {
	out, err := s.db.UpdateTemplate(ctx, authorID, id, t, s.now())
	if err != nil {
		return store.Template{}, err
	}
	s.log.Info("template edited", "template_id", out.ID, "author_id", authorID, "public", out.Public)
	return out, nil
}

// DeleteTemplate deletes an author's template.
func (s *Service) DeleteTemplate(ctx context.Context, authorID, id int64) error {
	return s.db.DeleteTemplate(ctx, authorID, id)
}

// bookingRuntime is the runtime to book with: the request's, its secrets
// without values filled from its template when the buyer may use it (a
// public template's secrets stay its author's). A secret left without a
// value is invalid: the agent would start the container without it.
func (s *Service) bookingRuntime(ctx context.Context, buyerID int64, rt market.Runtime) (market.Runtime, error) {
	if rt.IsZero() {
		return rt, nil
	}
	if rt.TemplateID != 0 {
		t, err := s.db.FindTemplateForUse(ctx, buyerID, rt.TemplateID)
		if market.ErrorCode(err) == market.CodeNotFound {
			return market.Runtime{}, &market.Error{Code: market.CodeInvalid, Message: "Please correct the highlighted fields.",
				Fields: map[string]string{"runtime.template": "That template could not be found; choose another."}}
		}
		if err != nil {
			return market.Runtime{}, err
		}
		rt = rt.FillSecrets(t.Runtime)
		// The template's secrets the request does not name (the form never
		// carries them) come with it.
		for _, e := range t.Runtime.Env {
			if e.Secret && !slices.ContainsFunc(rt.Env, func(x market.EnvVar) bool { return x.Name == e.Name }) {
				rt.Env = append(slices.Clone(rt.Env), e)
			}
		}
	}
	if missing := rt.MissingSecrets(); len(missing) > 0 {
		return market.Runtime{}, &market.Error{Code: market.CodeInvalid, Message: "Please correct the highlighted fields.",
			Fields: map[string]string{"runtime.env": fmt.Sprintf("The secret %s has no value: give it one, or save the runtime as your template and book from it.",
				strings.Join(missing, ", "))}}
	}
	return rt, nil
}

// bookWithRuntime is Book with the reservation's runtime kept in the same
// transaction.
func (s *Service) bookWithRuntime(ctx context.Context, buyerID int64, pieces []market.ReservationPiece, requestJSON string, rt market.Runtime, hold time.Duration) (market.Reservation, error) {
	if rt.IsZero() {
		return s.Book(ctx, buyerID, pieces, requestJSON, hold)
	}
	r, err := s.db.CreateReservationWithRuntime(ctx, buyerID, pieces, requestJSON, rt, s.now(), hold)
	if err != nil {
		return market.Reservation{}, err
	}
	// The image only: never the environment, which may hold secrets.
	s.log.Info("reservation held", "reservation_id", r.ID, "buyer_id", buyerID, "amount_cents", int64(r.AmountCents), "image", rt.Image)
	return r, nil
}

// RecordContainer records an agent's report of a piece's container on its
// node (store.RecordContainer: a failure before the end opens an incident).
func (s *Service) RecordContainer(ctx context.Context, tokenID, pieceID int64, rep market.ContainerReport) (store.PieceContainer, error) {
	c, err := s.db.RecordContainer(ctx, tokenID, pieceID, rep, s.now())
	s.agent.cache.dropNode(tokenID)
	if err != nil {
		return store.PieceContainer{}, err
	}
	s.log.Info("container reported", "piece_id", pieceID, "node", c.Node, "phase", string(c.Phase), "message", c.Message)
	return c, nil
}

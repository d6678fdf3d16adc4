// Package agenttest holds helpers for tests of agent runs.
package agenttest

import (
	"context"
	"fmt"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
)

// ByTurn is a scripted model whose reply depends only on the request: turn n
// (the number of assistant messages already in the conversation) gets
// Turns[n], and turns past the script answer with a text saying so. Unlike
// llmtest.Scripted, which plays its turns in call order, it answers a retried
// turn — or one asked again by a restarted process — the same way, which is
// what a durable run needs from a test model.
type ByTurn struct {
	Turns []llmtest.ScriptTurn
	// BeforeReply, when set, runs before each reply with the turn number
	// (1-based); its error fails the turn.
	BeforeReply func(ctx context.Context, turn int) error
}

func (b *ByTurn) pick(ctx context.Context, req *llm.Request) (*llmtest.Scripted, error) {
	n := 0
	for _, m := range req.Messages {
		if m.GetRole() == toolfleetv1.Role_ROLE_ASSISTANT {
			n++
		}
	}
	if b.BeforeReply != nil {
		if err := b.BeforeReply(ctx, n+1); err != nil {
			return nil, err
		}
	}
	if n >= len(b.Turns) {
		return llmtest.NewScripted(llmtest.SayText(fmt.Sprintf("no script for turn %d", n+1))), nil
	}
	return llmtest.NewScripted(b.Turns[n]), nil
}

// Complete implements llm.Model.
func (b *ByTurn) Complete(ctx context.Context, req *llm.Request) (*toolfleetv1.Message, error) {
	s, err := b.pick(ctx, req)
	if err != nil {
		return nil, err
	}
	return s.Complete(ctx, req)
}

// Stream implements llm.Model.
func (b *ByTurn) Stream(ctx context.Context, req *llm.Request, onDelta func(llm.Delta) error) (*toolfleetv1.Message, error) {
	s, err := b.pick(ctx, req)
	if err != nil {
		return nil, err
	}
	return s.Stream(ctx, req, onDelta)
}

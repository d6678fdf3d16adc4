package llm

import (
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// OneCallPerTurn reports whether r asks for at most one tool call per turn
// (ParallelToolCalls set to false).
func (r *Request) OneCallPerTurn() bool {
	return r != nil && r.ParallelToolCalls != nil && !*r.ParallelToolCalls
}

// KeepFirstCall enforces a request that allows one tool call per turn on a
// finished assistant message: only its first call is kept. Providers treat
// parallel_tool_calls=false as a hint at best (Gemini and Bedrock have no
// such flag, OpenAI-compatible servers may ignore it, a text-protocol model
// may write several blocks), so every Model in this package and its
// sub-packages applies it to Complete and Stream. msg is trimmed in place
// and returned; it is unchanged when req allows parallel calls.
func KeepFirstCall(req *Request, msg *toolfleetv1.Message) *toolfleetv1.Message {
	if !req.OneCallPerTurn() || len(ToolCalls(msg)) < 2 {
		return msg
	}
	parts := msg.Parts[:0]
	calls := 0
	for _, p := range msg.GetParts() {
		if p.GetToolCall() != nil {
			calls++
			if calls > 1 {
				continue
			}
		}
		parts = append(parts, p)
	}
	clear(msg.Parts[len(parts):])
	msg.Parts = parts
	return msg
}

// FirstCallDeltas wraps onDelta (may be nil) for a request that allows one
// tool call per turn: the fragments of a second and later call never reach
// it, while text, usage and the stop reason still do, so the stream is read
// to its end and the turn's usage is complete. Pair it with KeepFirstCall
// on the assembled message. For other requests onDelta is returned as is.
func FirstCallDeltas(req *Request, onDelta func(Delta) error) func(Delta) error {
	if !req.OneCallPerTurn() || onDelta == nil {
		return onDelta
	}
	// The shadow assembler tells which call a fragment belongs to with the
	// same rules that assemble the message; it never holds arguments.
	var shadow Assembler
	return func(d Delta) error {
		if tc := d.ToolCall; tc != nil {
			id := *tc
			id.Arguments, id.Signature = "", nil
			if shadow.callOrdinal(&id) > 1 {
				d.ToolCall = nil
				if d.empty() {
					return nil
				}
			}
		}
		return onDelta(d)
	}
}

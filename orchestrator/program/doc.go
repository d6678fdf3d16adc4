// Package program runs Starlark programs durably: [ProgramWorkflow] executes the
// script inside a Temporal workflow, and every tool call the script makes is a
// Temporal activity that goes through the gateway as the program's principal. A
// crash mid-script replays the script from history; finished calls are not made
// again.
//
// The interpreter is deterministic: no wall clock, no randomness, no load, no
// recursion, Go maps turned into dicts in sorted key order, and a step budget
// counted by Starlark's own step counter. Programs see these globals:
//
//	args                     the program's inputs (a dict)
//	call(tool_id, **kwargs)  call a tool; returns a result (ok, value, error)
//	<Model_Name>(**kwargs)   one typed stub per allowed tool, e.g. Calculator_Add(a=1, b=2)
//	parallel(fns, width=0)   run zero-argument functions concurrently, results in order
//	json.encode / decode     JSON helpers (json.indent too)
//	fail(msg)                end the program with an error
//	print(...)               publish a "print" program event
//
// The program's result is the value of its top-level variable `result`
// (None when it sets none). See docs/programs.md.
package program

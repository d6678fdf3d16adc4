// Package gateway is toolfleet's front door: it discovers tool workers (static
// addresses and NATS announcements), loads their contracts by gRPC server
// reflection and lets callers list, search and call tools over gRPC, Connect,
// gRPC-Web, an OXP HTTP JSON surface and MCP, all on one h2c port.
//
// Every call runs the same pipeline:
//
//	authenticate → resolve → authorize → approve → idempotency → validate → invoke → map → publish event → respond
//
// call.go is that pipeline; each concern it joins has its own place:
//
//	step            where
//	authenticate    auth/ (tokens, scopes, delegation), service.go (credentials per surface)
//	resolve         registry/ (workers and their dialing, contracts, trust rule, snapshots, replicas)
//	authorize       auth/
//	approve         auth/ (approvals)
//	idempotency     idempotency.go, idempotency/ (the call_id store and call journal:
//	                ran, did not run, or may have run, from facts)
//	validate        validate.go (the JSON Schema rules), decode.go (decoding the
//	                input, with a fast path for flat inputs)
//	ask the caller  clientinput.go, clientinput/ (a tool's question to its caller
//	                and the sealed request_state)
//	invoke, map     invoke.go (one attempt, the next replica only if it did not start;
//	                the worker holds the call's claim)
//	publish event   events.go, events/
//	surfaces        service.go (gRPC, Connect), oxp/ (OXP HTTP JSON), mcp/ (MCP),
//	                handler.go and listener.go (one port), browser.go (browser safety)
//	discovery       discovery.go (ListTools, GetTool, SearchTools), search/
//	store shares    shares.go (one principal's share of the call_id store, the
//	                result handles and the call events), ratelimit/
//
// A call fails in exactly one of three ways (docs/gateway.md):
//
//   - a server error before the tool ran (unknown tool, auth, worker unavailable or
//     too slow): an RPC error code with a toolfleetv1.ServerError detail, HTTP 400
//     (401/403 for auth);
//   - a validation error, the input broke the contract: InvalidArgument with a
//     toolfleetv1.ValidationError detail, HTTP 422;
//   - an execution error, the tool ran and failed: a normal response with
//     success=false and a toolfleetv1.ToolError, HTTP 200.
//
// Create a [Gateway] with [New] and serve it with [Gateway.Run]; [Gateway.Call]
// runs the pipeline in-process for other services (e.g. the MCP surface).
package gateway

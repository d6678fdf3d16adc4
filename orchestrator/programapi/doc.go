// Package programapi serves toolfleet.v1.ProgramService (Connect, gRPC,
// gRPC-Web, HTTP JSON) over program.Programs, beside package agentapi, which
// serves the AgentService over agent.Runs; both sit on toolcall/apibase
// (callers and scopes, panic recovery, the late-bound handler) and are
// mounted at the gateway's address by cmd/. Each is its connect-go handler
// alone, which answers every protocol (the gateway hands it gRPC calls too).
//
// Scopes: programs:run (RunProgram, CancelProgram), programs:read
// (GetProgram, ListPrograms, WatchProgram, ListTriggers), programs:approve
// (DecideProgramApproval). A caller sees and steers only the programs it
// started unless it holds programs:admin. A program's tool calls use the
// starter's subject and scopes, recorded at RunProgram.
//
// The service turns requests into a program's Input and its Status and
// errors into responses; the workflow, its limits and its errors are package
// program's. It imports program, runstore, toolcall and ids, never agent, a
// trigger or the process (layering_test.go).
package programapi

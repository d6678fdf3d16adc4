package main

import (
	"errors"

	"github.com/toolfleet/toolfleet/sdk/client"
)

// Exit codes of toolfleet (docs/client.md): a script can tell the three
// failure kinds of a tool call apart.
const (
	exitOK         = 0
	exitOther      = 1 // usage errors and everything else
	exitServer     = 2 // server error: the tool did not run (unknown tool, auth, unavailable, deadline)
	exitValidation = 3 // validation error: the input broke the contract
	exitExecution  = 4 // execution error: the tool ran and failed
)

// exitError carries an exit code; the command already reported the failure.
type exitError struct{ code int }

func (e *exitError) Error() string { return "reported" }
func (e *exitError) Unwrap() error { return errReported }

// exitCode maps a command's error to the process exit code.
func exitCode(err error) int {
	var ee *exitError
	var se *client.ServerError
	var ve *client.ValidationError
	var xe *client.ExecutionError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ve):
		return exitValidation
	case errors.As(err, &se):
		return exitServer
	case errors.As(err, &xe):
		return exitExecution
	default:
		return exitOther
	}
}

// Package jsonerr says what is wrong with a JSON document in the terms of
// whoever wrote it — the line and column, and what was expected there —
// never a decoder's internals ("proto: syntax error", Go type names). Every
// surface that reads JSON a caller wrote (the CLI, Connect, OXP HTTP, MCP)
// words its refusal through it, so the same mistake reads the same way.
package jsonerr

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// Syntax returns why b is not one JSON value, as "line L, column C: what
// was expected", or "" when it is.
func Syntax(b []byte) string {
	dec := json.NewDecoder(bytes.NewReader(b))
	var v any
	err := dec.Decode(&v)
	var se *json.SyntaxError
	switch {
	case err == nil:
		if off := dec.InputOffset(); len(bytes.TrimSpace(b[off:])) > 0 {
			rest := bytes.TrimLeft(b[off:], " \t\r\n")
			return at(b, len(b)-len(rest)) + "more after the JSON value ended"
		}
		return ""
	case errors.As(err, &se):
		return at(b, int(se.Offset)-1) + explain(se.Error())
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		if len(bytes.TrimSpace(b)) == 0 {
			return "empty: a JSON value was expected"
		}
		return at(b, len(b)) + "the JSON ends before it is complete (a closing } ] or \" is missing)"
	}
	return err.Error()
}

// at is "line L, column C: " of byte offset off in b (both from 1).
func at(b []byte, off int) string {
	off = max(0, min(off, len(b)))
	line := 1 + bytes.Count(b[:off], []byte("\n"))
	col := off - bytes.LastIndexByte(b[:off], '\n')
	return fmt.Sprintf("line %d, column %d: ", line, col)
}

// explain rewords encoding/json's syntax messages as what was expected.
func explain(msg string) string {
	for _, r := range []struct{ suffix, expected string }{
		{"looking for beginning of value", "a value was expected"},
		{"looking for beginning of object key string", "a key in double quotes was expected"},
		{"after object key", "':' was expected after the key"},
		{"after object key:value pair", "',' or '}' was expected after the value"},
		{"after array element", "',' or ']' was expected after the element"},
		{"in string literal", "a character that is not allowed in a string (escape it)"},
		{"in numeric literal", "a number is malformed"},
		{"in literal true", "'true' is misspelled"},
		{"in literal false", "'false' is misspelled"},
		{"in literal null", "'null' is misspelled"},
	} {
		if strings.HasSuffix(msg, r.suffix) || strings.Contains(msg, r.suffix+" (expecting") {
			char, _, _ := strings.Cut(strings.TrimPrefix(msg, "invalid character "), " ")
			return "unexpected " + char + ": " + r.expected
		}
	}
	return msg
}

// protoPos matches the position protojson puts in its errors.
// (protojson separates words with a non-breaking space at random, so that
// nobody matches its text: this only finds the position).
var protoPos = regexp.MustCompile(`^proto:[\s\x{00a0}]*(?:syntax[\s\x{00a0}]+error[\s\x{00a0}]*)?\(line (\d+):(\d+)\):[\s\x{00a0}]*`)

// Describe words err, the error of decoding b (protojson's or
// encoding/json's), for the caller: a syntax error with its line, column
// and what was expected; a valid document that does not fit the message
// with protojson's position and reason, without its "proto:" prefix.
func Describe(b []byte, err error) error {
	if err == nil {
		return nil
	}
	if s := Syntax(b); s != "" {
		return &Error{Msg: "not valid JSON: " + s, err: err}
	}
	msg := err.Error()
	if m := protoPos.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		col, _ := strconv.Atoi(m[2])
		msg = fmt.Sprintf("line %d, column %d: %s", line, col, msg[len(m[0]):])
	}
	msg = strings.TrimLeft(strings.TrimPrefix(msg, "proto:"), " \u00a0")
	return &Error{Msg: msg, err: err}
}

// Error is a JSON document's problem in its author's terms; Unwrap gives the
// decoder's own error.
type Error struct {
	Msg string
	err error
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.err }

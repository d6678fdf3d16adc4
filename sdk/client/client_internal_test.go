package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// The end-to-end tests, against a real gateway, are in e2e.

// TestPrepare: a call_id is generated only when the client may retry a tool
// that is neither read-only nor idempotent; a caller's id is always kept.
func TestPrepare(t *testing.T) {
	t.Parallel()
	retries := plan{policy: RetryPolicy{}.WithDefaults()}
	once := plan{policy: RetryPolicy{MaxAttempts: 1}.WithDefaults()}
	harmless := plan{policy: RetryPolicy{}.WithDefaults(), harmless: true}
	tests := []struct {
		name   string
		callID string
		p      plan
		wantID bool
		// allow is the request's allow_result_handle, handles the client's option.
		allow, handles, wantAllow bool
	}{
		{"side effects and retries", "", retries, true, false, false, false},
		{"no retries", "", once, false, false, false, false},
		{"read-only or idempotent", "", harmless, false, false, false, false},
		{"caller's id kept", "mine", harmless, true, false, false, false},
		{"the request's handle opt-in kept with a new id", "", retries, true, true, false, true},
		{"the client's handle opt-in", "", once, false, false, true, true},
		{"the client's handle opt-in, caller's id kept", "mine", retries, true, false, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := &toolfleetv1.CallToolRequest{CallId: tt.callID, ToolId: "KV.Delete", Approval: &toolfleetv1.Approval{Approver: "ana"},
				AllowResultHandle: tt.allow}
			got := prepare(req, tt.p, tt.handles)
			if got.GetAllowResultHandle() != tt.wantAllow {
				t.Fatalf("allow_result_handle %v, want %v", got.GetAllowResultHandle(), tt.wantAllow)
			}
			if (got.GetCallId() != "") != tt.wantID || tt.callID != "" && got.GetCallId() != tt.callID {
				t.Fatalf("call_id %q, want one: %v", got.GetCallId(), tt.wantID)
			}
			if got.GetApproval().GetApprover() != "ana" {
				t.Fatalf("approval dropped: %v", got)
			}
		})
	}
}

func TestFromRPC(t *testing.T) {
	t.Parallel()
	withDetail := func(code codes.Code, d *toolfleetv1.ServerError) error {
		st, err := status.New(code, "boom").WithDetails(d)
		if err != nil {
			t.Fatal(err)
		}
		return st.Err()
	}
	ve := (&ValidationError{Message: "bad", ParameterErrors: map[string]string{"a": "must be a number"}}).GRPCStatus().Err()
	connectVE := connect.NewError(connect.CodeInvalidArgument, errors.New("bad"))
	if d, err := connect.NewErrorDetail(&toolfleetv1.ValidationError{Message: "bad", ParameterErrors: map[string]string{"a": "x"}}); err == nil {
		connectVE.AddDetail(d)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel2()
	tests := []struct {
		name     string
		ctx      context.Context
		err      error
		wantCode codes.Code // for server errors
		wantVE   bool
		wantIs   error
	}{
		{"server detail", context.Background(), withDetail(codes.NotFound, &toolfleetv1.ServerError{Message: "unknown tool"}), codes.NotFound, false, nil},
		{"validation detail", context.Background(), ve, 0, true, nil},
		{"connect validation detail", context.Background(), connectVE, 0, true, nil},
		{"no detail", context.Background(), status.Error(codes.Unavailable, "down"), codes.Unavailable, false, nil},
		{"caller's deadline", expired, status.Error(codes.DeadlineExceeded, "late"), codes.DeadlineExceeded, false, context.DeadlineExceeded},
		{"the tool's own timeout", context.Background(), status.Error(codes.DeadlineExceeded, "late"), codes.DeadlineExceeded, false, nil},
		{"cancelled", cancelled, connect.NewError(connect.CodeCanceled, context.Canceled), codes.Canceled, false, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := fromRPC(tt.ctx, tt.err, "id-1")
			var se *ServerError
			var v *ValidationError
			switch {
			case tt.wantVE:
				if !errors.As(err, &v) || v.ParameterErrors["a"] == "" || v.CallID != "id-1" {
					t.Fatalf("got %#v, want a *ValidationError", err)
				}
			case !errors.As(err, &se) || se.Code != tt.wantCode || se.CallID != "id-1":
				t.Fatalf("got %#v, want a %s *ServerError", err, tt.wantCode)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Fatalf("errors.Is(%v, %v) = false", err, tt.wantIs)
			}
			if tt.wantIs == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
				t.Fatalf("%v matches a context error, but the caller's context is live", err)
			}
		})
	}
}

func TestFromFailure(t *testing.T) {
	t.Parallel()
	err := fromFailure(&toolfleetv1.CallFailure{Code: "PERMISSION_DENIED", CallId: "c",
		Detail: &toolfleetv1.CallFailure_ServerError{ServerError: &toolfleetv1.ServerError{Message: "no"}}})
	var se *ServerError
	if !errors.As(err, &se) || se.Code != codes.PermissionDenied || se.CallID != "c" || se.Message != "no" {
		t.Fatalf("got %#v", err)
	}
}

func TestInputOf(t *testing.T) {
	t.Parallel()
	type in struct {
		A float64 `json:"a"`
	}
	tests := []struct {
		name    string
		input   any
		wantA   float64
		wantErr bool
	}{
		{"nil", nil, 0, false},
		{"map", map[string]any{"a": 1.5}, 1.5, false},
		{"struct", in{A: 2}, 2, false},
		{"json string", `{"a": 3}`, 3, false},
		{"json bytes", []byte(`{"a": 4}`), 4, false},
		{"not an object", `[1]`, 0, true},
		{"not JSON", `{`, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := InputOf(tt.input)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err == nil && s.GetFields()["a"].GetNumberValue() != tt.wantA {
				t.Fatalf("a = %v, want %v", s.GetFields()["a"], tt.wantA)
			}
		})
	}
}

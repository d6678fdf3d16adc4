package contract_test

import "google.golang.org/protobuf/types/known/durationpb"

var (
	durationpb3s    = durationpb.Duration{Seconds: 3}
	durationpb100ms = durationpb.Duration{Nanos: 100_000_000}
)

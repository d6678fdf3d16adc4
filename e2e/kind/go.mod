module github.com/toolfleet/toolfleet/e2e/kind

go 1.26.8

require (
	connectrpc.com/connect v1.21.1
	github.com/golang-jwt/jwt/v5 v5.3.1
	github.com/nats-io/nats.go v1.55.0
	github.com/toolfleet/toolfleet v0.0.0
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream v1.7.16 // indirect
	github.com/aws/smithy-go v1.28.6 // indirect
	github.com/cenkalti/backoff/v5 v5.0.3 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260819154853-08b0e4226688 // indirect
)

replace github.com/toolfleet/toolfleet => ../..

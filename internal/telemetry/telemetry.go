// Package telemetry sets up OpenTelemetry tracing for a toolfleet process.
//
// Tracing is on when the standard OTLP variables name a collector
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, with the
// exporter's other OTEL_* settings) and OTEL_SDK_DISABLED is not "true". Then
// spans are batched to the collector over OTLP/gRPC, and the services add
// spans for their gRPC hops (gateway, workers), Temporal workflows and
// activities, and tool calls. Either way the process propagates W3C trace
// context, so a caller's traceparent reaches the tools even when this process
// records nothing.
package telemetry

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
)

// Propagator is the W3C trace context and baggage, what every hop speaks.
var Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Configured reports whether the environment asks for tracing.
func Configured() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup installs the W3C propagator and, when [Configured], a TracerProvider
// exporting to the OTLP collector as service. It returns whether tracing is
// on and a shutdown that flushes the spans still batched.
func Setup(ctx context.Context, service string) (enabled bool, shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(Propagator)
	if !Configured() {
		return false, func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return false, nil, fmt.Errorf("telemetry: OTLP exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(service)))
	if err != nil {
		return false, nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return true, tp.Shutdown, nil
}

// NATSCarrier carries trace context in NATS headers. Unlike HTTP's, NATS
// header names are case-sensitive: keys are kept as the propagator writes
// them ("traceparent"), which is what other toolfleet events use.
type NATSCarrier nats.Header

// Get returns the first value of key.
func (c NATSCarrier) Get(key string) string { return nats.Header(c).Get(key) }

// Set replaces key's values.
func (c NATSCarrier) Set(key, value string) { c[key] = []string{value} }

// Keys lists the keys.
func (c NATSCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

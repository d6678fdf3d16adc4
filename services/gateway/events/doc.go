// Package events publishes the gateway's call events to JetStream, at least once
// and without ever blocking a call: events wait in a bounded queue drained by
// one goroutine; every event is confirmed by its own JetStream ack, unanswered
// ones are sent again (the stream drops copies by Nats-Msg-Id), ones the stream
// refuses are retried a few times and then dropped, counted and logged, as are
// events that find the queue full while NATS is away. With a [Share], the
// events of a principal over its share of the stream are not stored (counted
// as dropped, logged at a bounded rate), so one caller's flood cannot evict
// another's events from a stream that drops its oldest when full.
//
// Events are protojson toolfleet.v1.CallEvent bodies (written by a fast encoder
// that follows the message's descriptor) on
// toolfleet.events.call.<Toolkit>.<Tool>.<kind> with CloudEvents-style headers.
package events

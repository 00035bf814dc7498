// Package schema holds the wire contracts of toolbus: JSON-RPC 2.0 messages as
// agents send them, the error codes every layer answers with, the grammar of
// method names, and the msgpack envelope that carries a call and its reply over
// NATS.
//
// The ingress parses a body with [Parse] into [Item] values, turns the valid
// ones into [Call] values for the aggregator, and writes [Response] values back.
// Workers read a [CallEnvelope] and answer with a [ReplyEnvelope]. Errors of
// every layer are [*Error] values; [ErrorFrom] maps any Go error to one.
//
// Ids are kept as the raw JSON bytes the client sent, so a string id stays a
// string and a large integer keeps every digit. The bus protocol is described
// for implementers in other languages in PROTOCOL.md, next to this file.
package schema

// Package bus connects toolbus to NATS: client connections with reconnect and
// drain settings fit for production ([Connect]), an embedded NATS server with
// JetStream for the one-process mode and for tests ([StartEmbedded]), the
// subject names calls travel on ([Subjects]), and helpers that put a
// [schema.CallEnvelope] or [schema.ReplyEnvelope] into a NATS message and read
// it back.
//
// A method name becomes subject tokens under "<prefix>.call."; the grammar
// enforced by [schema.ValidateMethod] makes sure no name can form a wildcard
// or leave the prefix.
package bus

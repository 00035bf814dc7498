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
//
// # When NATS goes away
//
// A connection made by [Connect] never gives up. When it drops, it tries
// again at once and then with a pause that doubles at each failed step,
// with jitter, up to [DefaultReconnectMaxWait] while no server answers,
// and it logs one warning per step that names the address, the cause and
// the flag that fixes it: nothing listens there, the host is unknown, the
// server did not speak NATS (the URL names another port, such as the HTTP
// one: [ErrNotNATS]), or the server refused the credentials or TLS.
// [WithStatusFunc] is told the same sentence at each step, which is what a
// process's readiness says ([Startup.WatchConn]).
//
// A server that refuses the credentials after the connection was up (NATS
// restarted with another token, a user removed) is tried again too, with
// the pause growing up to [DefaultRefusedReconnectMaxWait], and the
// process does not stop: a restart by a supervisor would present the same
// credential and be refused again, while the fix is an operator's (give
// the server back the credential, or the part the new one: a credentials
// file is read again at every attempt), and the part then recovers by
// itself. Meanwhile it is not ready and says why. Only before the first
// connection is a refused credential fatal, as a mistake in the
// configuration that a person is there to read.
//
// While disconnected, what the process publishes waits in a bounded
// buffer ([DefaultReconnectBuffer]) and goes out on reconnection; a
// caller that must not wait checks the connection's state first, as the
// aggregator does before it publishes a call.
package bus

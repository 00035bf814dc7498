// Package toolbustest starts a whole toolbus cluster inside a test, in one
// line: an embedded NATS server, a worker serving the demo tools (or the
// tools a test registers), the aggregator and the HTTP ingress on a loopback
// port.
//
//	c := toolbustest.Start(t)
//	resp := c.Call(t, "echo", `{"hello":"world"}`)
//
// Everything it starts is stopped by t.Cleanup. Workers added with
// [Cluster.AddWorker] have connections of their own, so a test can kill one
// abruptly to see what the rest of the cluster does. [Eventually] waits for
// what a test cannot be told of directly, such as an announcement reaching
// the registry.
package toolbustest

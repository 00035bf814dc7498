// Package client is the Go client agents use to call tools on a toolbus
// cluster over JSON-RPC 2.0.
//
// [New] makes a [Client] for an endpoint; the URL's scheme chooses the
// transport. With http:// or https:// every message is one POST to the
// ingress. With ws:// or wss:// the client keeps one WebSocket connection
// open and multiplexes every call over it, matching answers to calls by id;
// it pings the server to find out when it is gone and reconnects by itself.
// [Dial] is New that waits for the first WebSocket connection.
//
//	c, err := client.New("http://127.0.0.1:8080/rpc", client.WithRetry(client.RetryPolicy{MaxAttempts: 3}))
//	if err != nil {
//		return err
//	}
//	defer c.Close()
//	var sum int
//	err = c.Call(ctx, "math.add", map[string]int{"a": 1, "b": 2}, &sum, client.Timeout(time.Second))
//
// [Client.Call] sends one call and decodes its result; [Client.Notify] sends
// a notification; [Client.Batch] builds a batch call by call, and after
// [Batch.Send] each [Future] holds its own call's result or error.
//
// # Ids
//
// Every call gets an id of its own: a JSON string made of a random prefix,
// drawn when the client is made, and a counter. Responses are matched to
// calls by id whatever order they come in. A call that no response answers
// fails with [ErrMissingResponse] while the rest of its batch keeps its
// results; responses whose ids were not asked for, or that answer an id
// twice, are reported ([ErrUnknownResponse], [ErrDuplicateResponse]).
//
// # Errors
//
// An error the server answered is the [*schema.Error] it sent, with its code
// and data, so errors.Is(err, schema.ErrTimeout) and errors.As work. A
// message that could not be delivered, or whose answer could not be read,
// fails with a [*TransportError] (errors.Is(err, ErrTransport)). The body of
// an HTTP answer is read as JSON-RPC whatever its status and Content-Type,
// because a proxy on the way may set either: a 502 carrying a JSON-RPC
// error yields that error, and a 502 carrying HTML yields a TransportError
// naming the status.
//
// # Deadlines
//
// [Timeout] gives a call (or a batch) a deadline, sent to the ingress as the
// Toolbus-Timeout header: the server answers -32001 when it passes, and the
// client waits no longer than the deadline plus a grace
// ([WithTimeoutGrace]). A batch is one HTTP request with one header, so it
// has one timeout, the smallest asked for. The context bounds everything,
// retries included.
//
// # Retries
//
// Nothing is retried unless [WithRetry] is given. Then a call is retried
// when its error says it may be: data with "retryable": true, a -32002
// with "retry_after_ms" (waited for as asked), or a transport failure from
// before the message left the client, or from a lost WebSocket connection.
// Waits grow exponentially with jitter, attempts are bounded, and
// notifications are never retried.
//
// # WebSocket
//
// The WebSocket transport answers the server's pings, pings the server
// every [WithPingInterval] and treats a missing pong as a dead connection:
// it closes it and fails the calls waiting on it with a retryable
// TransportError wrapping [ErrConnectionLost]. It then reconnects, waiting
// about 1s before the first attempt and doubling the wait after every
// failed one, up to 60s ([WithReconnectBackoff]). A call made while the
// client is disconnected waits for the next connection for as long as its
// context and timeout allow; it does not fail fast, since the client is
// already reconnecting. WebSocket messages carry no headers: the default
// timeout of [WithTimeout] is sent with the handshake, and a per-call
// [Timeout] only bounds the client's wait, after which the client sends
// rpc.cancel for the call. [Client.Close] closes the connection and returns
// once every goroutine of the client has ended.
package client

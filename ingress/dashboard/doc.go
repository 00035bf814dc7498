// Package dashboard is the ingress's web page at /ui/: an embedded page
// (no build step, no files beside the binary) into which the server draws
// the state its caller may see ([State]), so that its first paint has
// data, and the same state at GET /ui/api/state, which the page then
// polls. It is read from one ingress replica's in-memory statistics, the
// registry of tools, the jobs service, the cluster's status answers and
// the fairness layer's queues and series ([Source]).
//
// What a caller is shown is its own ([View]): the rows of the methods it
// may call, its own recent errors and jobs, its own row of the Callers
// panel ([FairState]); an operator sees everything.
// The ingress, which holds the credentials, tells the dashboard who asks
// ([Access]). With authentication on, the page asks for an API key and
// signs in with it; the server checks the key and keeps it in a session
// cookie of the dashboard's own that scripts cannot read (see
// session.go), and checks it again on every request.
package dashboard

// Package dashboard is the ingress's web page at /ui/: an embedded page
// (no build step, no files beside the binary) and the data it polls at
// GET /ui/api/state ([State]), read from one ingress replica's in-memory
// statistics, the registry of tools and the jobs service ([Source]).
//
// What a caller is shown is its own ([View]): the rows of the methods it
// may call, its own recent errors and jobs; an operator sees everything.
// The ingress, which authenticates callers, builds the View of each
// request; the dashboard knows nothing of credentials.
package dashboard

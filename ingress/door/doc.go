// Package door is the seam between the ingress and its front doors (the
// MCP door of ingress/mcp and the A2A door of ingress/a2a): what a door
// needs of the ingress that mounts it, declared once below both.
//
// A door hands each HTTP request it serves to [Ingress.Request] and gets
// back a [Request]: who sent it, what it may call, and the ways to act
// under it, each of which runs through the ingress's plan and chain like
// a call of any other transport (method checks, authorization, deadlines,
// quotas, rate limits). The ingress implements [Ingress] once, for every
// door.
//
// The MCP door's jobs interface (ingress/mcp's Jobs: Promotable,
// Subscribe, HoldSubscription, SubscribeHeld) is not here. It is what
// that door needs of the jobs extension itself, not of the ingress: the
// ingress hands the extension to the door, which follows a job on it
// directly, outside the plan, and only that door uses it. Declared here
// it would be a second seam in a package meant to hold one, and its
// consumer would no longer own it.
package door

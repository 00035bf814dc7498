// Package mcp is the ingress's Model Context Protocol front door at
// [Path]: an MCP server, built on the official Go SDK, whose tools are
// the registry's live methods and whose tools/call runs through the
// ingress ([door.Ingress], the seam it shares with the A2A door) like a
// call of any other transport.
//
// mcp.go lists the tools, follows the registry and hands each request to
// the SDK handler of its protocol revision: the one with sessions up to
// 2025-11-25, the stateless one from 2026-07-28. jobs.go runs a call that
// asks for progress, or whose tool asks its caller questions, as a job of
// the jobs extension ([Jobs]), and puts the job's questions to the
// client: with elicitation/create at the revisions with sessions, as the
// call's input requests from 2026-07-28, whose request state state.go
// signs, so that the client's retry resumes the job on any replica with
// the same key ([WithRequestStateKey]).
package mcp

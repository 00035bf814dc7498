// Package authfile is the format of the ingress's --auth-file: the API
// keys it accepts, by their digest, with the methods each may call. The
// ingress command reads it, `toolbus api-key` adds a key to it
// ([AddKey]), and the tenants bench writes one for the servers it
// starts, so the format is declared once, here.
package authfile

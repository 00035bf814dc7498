// Package auth checks the credentials of the ingress's requests: API keys,
// configured only as their SHA-256 digests ([HashAPIKey]) and compared in
// constant time, and bearer JWTs signed with HS256 under a secret or with
// RS256 or ES256 under a key of a JWKS file. [New] checks a [Config] once;
// [Authenticator.Authenticate] then turns a request's headers into a
// [Principal]: the caller's name, the method patterns it may call and
// whether it is an operator.
//
// The package knows nothing of HTTP answers or of contexts: the ingress
// answers 401 when Authenticate fails, puts the principal in the request's
// context, and checks each call against [Principal.Allows]
// (github.com/toolbus/toolbus/ingress.WithAuth).
package auth

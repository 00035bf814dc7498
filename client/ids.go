package client

import (
	"crypto/rand"
	"encoding/base32"
	"strconv"
	"sync/atomic"
)

// idSource makes the ids of one client: a random prefix drawn when the
// client is made, then a counter, so that ids never repeat within a client
// and two clients, even in different processes, never share one. The ids
// are JSON strings, which every JSON-RPC server echoes unchanged.
type idSource struct {
	prefix string
	n      atomic.Uint64
}

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

func newIDSource() *idSource {
	var b [10]byte
	rand.Read(b[:]) // never fails: crypto/rand panics rather than return short
	return &idSource{prefix: idEncoding.EncodeToString(b[:]) + "-"}
}

// next returns a fresh id.
func (s *idSource) next() string {
	return s.prefix + strconv.FormatUint(s.n.Add(1), 36)
}

package bench

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/toolbus/toolbus/schema"
)

// EchoRequest is the request [Compare] sends by default: an echo call with a
// small object for params.
const EchoRequest = `{"jsonrpc":"2.0","id":1,"method":"echo","params":{"message":"hello, toolbus"}}`

// maxPlainBody bounds the request body [PlainEcho] reads.
const maxPlainBody = 1 << 20

// PlainEcho returns the baseline the bench compares toolbus against: an
// ordinary net/http JSON-RPC 2.0 handler that answers a single "echo" request
// with its params as the result, decoding and encoding with encoding/json. It
// does what any small JSON-RPC service would do and nothing more: no batches,
// no bus, no deadlines. Ids are echoed byte for byte; a request without an id
// is a notification and gets 204. It is safe for concurrent use.
func PlainEcho() http.Handler {
	return http.HandlerFunc(plainEcho)
}

type plainRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

type plainResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *schema.Error   `json:"error,omitempty"`
	ID      json.RawMessage `json:"id"`
}

func plainEcho(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPlainBody))
	if err != nil {
		http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
		return
	}
	var req plainRequest
	if err := json.Unmarshal(body, &req); err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			writePlain(w, plainResponse{Error: schema.ErrParse})
		} else {
			writePlain(w, plainResponse{Error: schema.ErrInvalidRequest})
		}
		return
	}
	switch {
	case req.JSONRPC != schema.Version:
		writePlain(w, plainResponse{Error: schema.ErrInvalidRequest, ID: req.ID})
	case req.ID == nil:
		w.WriteHeader(http.StatusNoContent)
	case req.Method != "echo":
		writePlain(w, plainResponse{Error: schema.ErrMethodNotFound, ID: req.ID})
	default:
		result := req.Params
		if result == nil {
			result = json.RawMessage("null")
		}
		writePlain(w, plainResponse{Result: result, ID: req.ID})
	}
}

func writePlain(w http.ResponseWriter, resp plainResponse) {
	resp.JSONRPC = schema.Version
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	// HTML escaping would rewrite ids such as "<a>": they must come back as
	// they were sent.
	enc.SetEscapeHTML(false)
	_ = enc.Encode(resp) // a write error means the client is gone
}

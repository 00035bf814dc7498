package schema

import (
	"bytes"
	"strconv"
	"testing"
)

var benchSingle = []byte(`{"jsonrpc":"2.0","method":"math.subtract","params":{"minuend":42,"subtrahend":23},"id":"call-1"}`)

func benchBatch(n int) []byte {
	var b bytes.Buffer
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"jsonrpc":"2.0","method":"demo.sleep","params":{"ms":100},"id":`)
		b.WriteString(strconv.Itoa(i))
		b.WriteByte('}')
	}
	b.WriteByte(']')
	return b.Bytes()
}

func BenchmarkParseSingle(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchSingle)))
	for b.Loop() {
		if _, _, err := Parse(benchSingle, Limits{MaxBatchItems: 1000, MaxDepth: 64}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseBatch100(b *testing.B) {
	body := benchBatch(100)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, _, err := Parse(body, Limits{MaxBatchItems: 1000, MaxDepth: 64}); err != nil {
			b.Fatal(err)
		}
	}
}

// benchLarge is one request whose params are about 64 KiB: a list of small
// records, with a non-ASCII character in each.
func benchLarge() []byte {
	var b bytes.Buffer
	b.WriteString(`{"jsonrpc":"2.0","method":"import","id":1,"params":{"items":[`)
	for i := 0; b.Len() < 64<<10; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"id":`)
		b.WriteString(strconv.Itoa(i))
		b.WriteString(`,"name":"caf\u00e9 é `)
		b.WriteString(strconv.Itoa(i))
		b.WriteString(`","price":-12.5e-1,"ok":true,"note":null,"tags":["a","b"]}`)
	}
	b.WriteString(`]}}`)
	return b.Bytes()
}

func BenchmarkParseLarge(b *testing.B) {
	body := benchLarge()
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, _, err := Parse(body, Limits{MaxBatchItems: 1000, MaxDepth: 64}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendBatch100(b *testing.B) {
	rs := make([]Response, 100)
	for i := range rs {
		rs[i] = Response{ID: []byte(strconv.Itoa(i)), Result: []byte(`{"slept_ms":100}`)}
	}
	rs[7] = Response{ID: []byte(`"seven"`), Error: LimitError("max_result_bytes", 1<<20, -1)}
	buf := make([]byte, 0, 8192)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = AppendBatch(buf[:0], rs); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMarshalCall(b *testing.B) {
	c := &CallEnvelope{ID: []byte(`"call-1"`), Method: "math.subtract", Params: []byte(`{"minuend":42,"subtrahend":23}`), Caller: "agent-7"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := MarshalCall(c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUnmarshalCall(b *testing.B) {
	data, err := MarshalCall(&CallEnvelope{ID: []byte(`"call-1"`), Method: "math.subtract", Params: []byte(`{"minuend":42,"subtrahend":23}`), Caller: "agent-7"})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := UnmarshalCall(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMarshalReply(b *testing.B) {
	r := ReplyResult([]byte(`{"difference":19}`))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := MarshalReply(r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUnmarshalReply(b *testing.B) {
	data, err := MarshalReply(ReplyResult([]byte(`{"difference":19}`)))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := UnmarshalReply(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUnmarshalReplyLarge(b *testing.B) {
	body := benchLarge()
	result := body[bytes.Index(body, []byte(`"params":`))+len(`"params":`) : len(body)-1]
	data, err := MarshalReply(ReplyResult(result))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(result)))
	for b.Loop() {
		if _, err := UnmarshalReply(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUnmarshalReplyError(b *testing.B) {
	data, err := MarshalReply(ReplyError(NewError(CodeTimeout, "timed out", map[string]any{"retryable": true})))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := UnmarshalReply(data); err != nil {
			b.Fatal(err)
		}
	}
}

package bus_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// BenchmarkRoundTrip compares a call's round trip through the embedded
// server over an in-process connection and over loopback TCP, the choice
// the one-process mode makes.
func BenchmarkRoundTrip(b *testing.B) {
	for _, tc := range []struct {
		name   string
		listen string
	}{
		{"in-process", ""},
		{"tcp", "127.0.0.1:0"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			e, err := bus.StartEmbedded(bus.EmbeddedConfig{Listen: tc.listen})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Shutdown()
			connect := func() *nats.Conn {
				var nc *nats.Conn
				if tc.listen == "" {
					nc, err = e.Connect()
				} else {
					nc, err = bus.Connect(e.ClientURL(), bus.WithToken(e.Token()))
				}
				if err != nil {
					b.Fatal(err)
				}
				return nc
			}
			server, client := connect(), connect()
			defer server.Close()
			defer client.Close()
			sub, err := server.QueueSubscribe("toolbus.call.echo", "toolbus-workers", func(m *nats.Msg) {
				env, _, err := bus.ReadCall(m)
				if err != nil {
					b.Error(err)
					return
				}
				bus.Reply(m, schema.ReplyResult(env.Params))
			})
			if err != nil {
				b.Fatal(err)
			}
			defer sub.Unsubscribe()
			server.Flush()
			env := &schema.CallEnvelope{ID: []byte(`1`), Method: "echo", Params: []byte(`{"hello":"world"}`)}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				msg, err := bus.CallMsg("toolbus.call.echo", env, time.Now().Add(time.Second), "")
				if err != nil {
					b.Fatal(err)
				}
				reply, err := client.RequestMsg(msg, 5*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := bus.ReadReply(reply); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

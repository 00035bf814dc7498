package bus_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func startEmbedded(t *testing.T, cfg bus.EmbeddedConfig) *bus.Embedded {
	t.Helper()
	e, err := bus.StartEmbedded(cfg)
	if err != nil {
		t.Fatalf("StartEmbedded: %v", err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

func TestCallRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name   string
		listen string
	}{
		{"in-process", ""},
		{"tcp", "127.0.0.1:0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startEmbedded(t, bus.EmbeddedConfig{Listen: tc.listen})
			var nc *nats.Conn
			var err error
			if tc.listen == "" {
				if e.ClientURL() != "" {
					t.Fatalf("ClientURL() = %q, want empty without listener", e.ClientURL())
				}
				nc, err = e.Connect()
			} else {
				nc, err = bus.Connect(e.ClientURL(), bus.WithToken(e.Token()))
			}
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			subj, _ := bus.NewSubjects("toolbus")
			subject, err := subj.Call("math.add")
			if err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(time.Second).Round(0)
			sub, err := nc.QueueSubscribe(subject, subj.QueueGroup(), func(m *nats.Msg) {
				env, dl, err := bus.ReadCall(m)
				if err != nil || !dl.Equal(deadline) {
					bus.Reply(m, schema.ReplyError(schema.Errorf(schema.CodeInternal, "bad call %v %v", err, dl)))
					return
				}
				bus.Reply(m, schema.ReplyResult(env.Params))
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			msg, err := bus.CallMsg(subject, &schema.CallEnvelope{ID: []byte(`"a"`), Method: "math.add", Params: []byte(`[1,2]`)}, deadline, "")
			if err != nil {
				t.Fatal(err)
			}
			resp, err := nc.RequestMsg(msg, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			r, err := bus.ReadReply(resp)
			if err != nil {
				t.Fatal(err)
			}
			if r.Err() != nil || string(r.Result) != "[1,2]" {
				t.Fatalf("reply = %s, %v; want [1,2]", r.Result, r.Err())
			}
		})
	}
}

func TestNoResponders(t *testing.T) {
	e := startEmbedded(t, bus.EmbeddedConfig{})
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	msg, _ := bus.CallMsg("toolbus.call.nobody", &schema.CallEnvelope{ID: []byte(`1`), Method: "nobody"}, time.Time{}, "")
	_, err = nc.RequestMsg(msg, 2*time.Second)
	if !errors.Is(err, bus.ErrNoResponders) {
		t.Fatalf("RequestMsg err = %v, want ErrNoResponders", err)
	}
}

// TestNoRespondersToAPublish: a plain publish (not a request) with a reply
// subject, on a subject nobody listens to, gets NATS's no-responders
// message on that reply subject; this is how a worker learns that nobody
// waits for a call's answer any more.
func TestNoRespondersToAPublish(t *testing.T) {
	e := startEmbedded(t, bus.EmbeddedConfig{})
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	inbox := nc.NewInbox()
	// An asynchronous subscription, as a worker's: a synchronous one
	// turns the message into an error of NextMsg.
	got := make(chan *nats.Msg, 1)
	if _, err := nc.Subscribe(inbox+".*", func(m *nats.Msg) { got <- m }); err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishMsg(&nats.Msg{Subject: "toolbus.nobody", Reply: inbox + ".1"}); err != nil {
		t.Fatal(err)
	}
	var m *nats.Msg
	select {
	case m = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no message on the reply subject")
	}
	if !bus.NoResponders(m) || m.Subject != inbox+".1" {
		t.Errorf("message on %s with header %v = not no responders, want no responders on %s", m.Subject, m.Header, inbox+".1")
	}
	for _, tc := range []struct {
		name string
		msg  *nats.Msg
	}{
		{"a reply", &nats.Msg{Data: []byte{0x81}}},
		{"an empty message without headers", &nats.Msg{}},
		{"another status", &nats.Msg{Header: nats.Header{"Status": []string{"408"}}}},
	} {
		if bus.NoResponders(tc.msg) {
			t.Errorf("NoResponders(%s) = true, want false", tc.name)
		}
	}
}

func TestSubjects(t *testing.T) {
	s, err := bus.NewSubjects("toolbus")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, method, want string
		ok                 bool
	}{
		{"plain", "echo", "toolbus.call.echo", true},
		{"dotted", "math.add", "toolbus.call.math.add", true},
		{"allowed punctuation", "a-b_c/d:e", "toolbus.call.a-b_c/d:e", true},
		{"star", "math.*", "", false},
		{"tail wildcard", "math.>", "", false},
		{"leading dot", ".echo", "", false},
		{"trailing dot", "echo.", "", false},
		{"double dot", "a..b", "", false},
		{"space", "a b", "", false},
		{"empty", "", "", false},
		{"reserved", "rpc.jobs.get", "", false},
		{"unicode", "ech\u00f6", "", false},
		{"too long", string(make([]byte, 201)), "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Call(tc.method)
			if (err == nil) != tc.ok || got != tc.want {
				t.Fatalf("Call(%q) = %q, %v; want %q, ok=%v", tc.method, got, err, tc.want, tc.ok)
			}
			if err != nil && !errors.Is(err, schema.ErrMethodNotFound) {
				t.Fatalf("Call(%q) error %v is not ErrMethodNotFound", tc.method, err)
			}
		})
	}
	if _, err := bus.NewSubjects("a.*"); err == nil {
		t.Fatal(`NewSubjects("a.*") succeeded, want error`)
	}
	for _, p := range []string{"math.*", "math.>", "*.add"} {
		if _, err := s.CallPattern(p); err != nil {
			t.Errorf("CallPattern(%q) = %v, want ok", p, err)
		}
	}
	for _, p := range []string{">.a", "rpc.*", "a..b", "a b"} {
		if _, err := s.CallPattern(p); err == nil {
			t.Errorf("CallPattern(%q) succeeded, want error", p)
		}
	}
	if m, ok := s.Method("toolbus.call.math.add"); !ok || m != "math.add" {
		t.Errorf("Method = %q, %v", m, ok)
	}
	if d := bus.DefaultSubjects(); d != s || d.IsZero() {
		t.Errorf("DefaultSubjects() = %+v (zero %v), want %+v", d, d.IsZero(), s)
	}
	if !(bus.Subjects{}).IsZero() {
		t.Error("Subjects{}.IsZero() = false, want true")
	}
}

func TestEmbeddedDataDir(t *testing.T) {
	dir := t.TempDir()
	e := startEmbedded(t, bus.EmbeddedConfig{DataDir: dir})
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AccountInfo(); err != nil {
		t.Fatalf("JetStream not enabled: %v", err)
	}
}

// TestQueueGroupSpansPatterns shows why every worker joins one queue group
// whatever pattern it serves: NATS picks one member per group name among all
// matching subscriptions, so a worker of "math.*" and one of "math.add"
// together receive each math.add call exactly once.
func TestQueueGroupSpansPatterns(t *testing.T) {
	e := startEmbedded(t, bus.EmbeddedConfig{})
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s, _ := bus.NewSubjects("toolbus")
	var mu sync.Mutex
	got := map[string]int{}
	for _, pattern := range []string{"math.*", "math.add", "math.>"} {
		subject, err := s.CallPattern(pattern)
		if err != nil {
			t.Fatal(err)
		}
		sub, err := nc.QueueSubscribe(subject, s.QueueGroup(), func(m *nats.Msg) {
			mu.Lock()
			got[pattern]++
			mu.Unlock()
			m.Respond([]byte("x"))
		})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	subject, _ := s.Call("math.add")
	const n = 300
	for range n {
		if _, err := nc.Request(subject, nil, 2*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	nc.Flush()
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, c := range got {
		total += c
	}
	if total != n {
		t.Fatalf("%d deliveries for %d calls (%v), want exactly one each", total, n, got)
	}
}

func TestEmbeddedListenerNeedsToken(t *testing.T) {
	for _, tc := range []struct {
		name  string
		token string // the token configured; "" has one generated
	}{
		{"generated", ""},
		{"chosen", "chosen-token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startEmbedded(t, bus.EmbeddedConfig{Listen: "127.0.0.1:0", Token: tc.token})
			token := e.Token()
			if token == "" || (tc.token != "" && token != tc.token) {
				t.Fatalf("Token() = %q, want %q or a generated one", token, tc.token)
			}
			for _, bad := range []struct {
				name string
				opts []bus.Option
			}{
				{"no token", nil},
				{"a wrong token", []bus.Option{bus.WithToken(token + "x")}},
			} {
				if nc, err := bus.Connect(e.ClientURL(), bad.opts...); err == nil {
					nc.Close()
					t.Errorf("connect over TCP with %s succeeded, want a refusal", bad.name)
				} else if !errors.Is(err, nats.ErrAuthorization) {
					t.Errorf("connect over TCP with %s = %v, want %v", bad.name, err, nats.ErrAuthorization)
				}
			}
			nc, err := bus.Connect(e.ClientURL(), bus.WithToken(token))
			if err != nil {
				t.Fatalf("connect over TCP with the token: %v", err)
			}
			nc.Close()
			// In-process clients present the token by themselves.
			nc, err = e.Connect()
			if err != nil {
				t.Fatalf("connect in-process: %v", err)
			}
			nc.Close()
		})
	}
	if e := startEmbedded(t, bus.EmbeddedConfig{}); e.Token() != "" {
		t.Errorf("Token() without a listener = %q, want empty", e.Token())
	}
}

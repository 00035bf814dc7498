package a2a_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"

	toolbusa2a "github.com/toolbus/toolbus/ingress/a2a"
	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
)

// Bounds of one caller's push configs in [limited]'s cluster.
const (
	testMaxConfigs = 3
	testMaxBytes   = 3000
)

// limited starts a cluster with jobs, authentication and the A2A front
// door, with push notifications to loopback receivers and small bounds of
// each caller's configs; alice, bob and carol may use echo and slow.
func limited(t *testing.T, g *gate) *toolbustest.Cluster {
	t.Helper()
	allow := []string{"rpc.jobs.*", "echo", "slow"}
	c := toolbustest.Start(t, toolbustest.WithTools(tools(g)), toolbustest.WithJobs(), toolbustest.WithDiscovery(),
		toolbustest.WithA2A(), toolbustest.WithGateway(func(c *node.GatewayConfig) {
			c.Jobs.CallbackAllow = []string{"127.0.0.1"}
			c.A2A.PushCallerMaxConfigs, c.A2A.PushCallerMaxBytes = testMaxConfigs, testMaxBytes
		}),
		toolbustest.WithAuth(auth.Config{Keys: []auth.APIKey{
			{Name: "alice", SHA256: auth.HashAPIKey("alice-key"), Allow: allow},
			{Name: "bob", SHA256: auth.HashAPIKey("bob-key"), Allow: allow},
			{Name: "carol", SHA256: auth.HashAPIKey("carol-key"), Allow: allow},
		}}))
	t.Cleanup(g.open)
	waitForTools(t, c, "echo", "slow")
	return c
}

// setPush sets a config of id with token on task, and returns the error.
func setPush(t *testing.T, cl *a2aclient.Client, task a2a.TaskID, url, id, token string) error {
	t.Helper()
	_, err := cl.SetTaskPushConfig(bounded(t), &a2a.TaskPushConfig{TaskID: task, Config: a2a.PushConfig{ID: id, URL: url, Token: token}})
	return err
}

// a2aError is the error member of an A2A JSON-RPC answer.
type a2aError struct {
	Code int            `json:"code"`
	Data map[string]any `json:"data"`
}

// postA2A posts body to the front door with key and returns the error it
// answers, failing the test when there is none.
func postA2A(t *testing.T, c *toolbustest.Cluster, key, body string) a2aError {
	t.Helper()
	status, b := c.PostURL(t, c.BaseURL+toolbusa2a.Path, body, auth.APIKeyHeader, key)
	var resp struct {
		Error *a2aError `json:"error"`
	}
	if err := json.Unmarshal(b, &resp); err != nil || status != http.StatusOK || resp.Error == nil {
		t.Fatalf("POST /a2a %s = %d %s, want 200 with an error", short(body), status, short(string(b)))
	}
	return *resp.Error
}

// short cuts s for a failure message.
func short(s string) string {
	if len(s) > 300 {
		return fmt.Sprintf("%s… (%d bytes)", s[:300], len(s))
	}
	return s
}

// names reports whether e's text names limit.
func (e a2aError) names(limit string) bool {
	s, _ := e.Data["error"].(string)
	return strings.Contains(s, limit)
}

func setBody(task a2a.TaskID, id, url, token string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tasks/pushNotificationConfig/set","params":{"taskId":%q,"pushNotificationConfig":{"id":%q,"url":%q,"token":%q}}}`,
		task, id, url, token)
}

// jobIDs lists the jobs of the caller of key.
func jobIDs(t *testing.T, c *toolbustest.Cluster, key string) []string {
	t.Helper()
	resp := c.Call(t, schema.MethodJobsList, `{}`, auth.APIKeyHeader, key)
	var list schema.JobList
	if resp.Error != nil || json.Unmarshal(resp.Result, &list) != nil {
		t.Fatalf("rpc.jobs.list = %s %v", resp.Result, resp.Error)
	}
	var ids []string
	for _, j := range list.Jobs {
		ids = append(ids, j.ID)
	}
	slices.Sort(ids)
	return ids
}

// TestPushCallerLimits checks the bounds of one caller's push configs:
// the count and the bytes over all its tasks, each refused as a server
// error naming its limit while other callers still set theirs, a config
// set again that takes no more room, and the size of one config's
// credentials.
func TestPushCallerLimits(t *testing.T) {
	c := limited(t, newGate())
	rcv := newReceiver(t)
	alice := client(t, c.BaseURL, "alice-key")
	bob := client(t, c.BaseURL, "bob-key")
	carol := client(t, c.BaseURL, "carol-key")
	first := sendTask(t, alice, send(call("slow", nil), false))
	second := sendTask(t, alice, send(call("slow", nil), false))

	t.Run("count", func(t *testing.T) {
		for i, task := range []a2a.TaskID{first.ID, first.ID, second.ID} {
			if err := setPush(t, alice, task, rcv.url, fmt.Sprint("c", i), "t"); err != nil {
				t.Fatalf("alice's push config %d of %d: %v", i+1, testMaxConfigs, err)
			}
		}
		if err := setPush(t, alice, first.ID, rcv.url, "c0", "again"); err != nil {
			t.Errorf("alice's push config c0 set again at her bound = %v, want it replaced", err)
		}
		if err := setPush(t, alice, second.ID, rcv.url, "c3", "t"); !errors.Is(err, a2a.ErrServerError) {
			t.Errorf("alice's push config past her bound = %v, want %v", err, a2a.ErrServerError)
		}
		if e := postA2A(t, c, "alice-key", setBody(second.ID, "c3", rcv.url, "t")); e.Code != -32000 || !e.names("a2a_push_caller_max_configs") {
			t.Errorf("alice's push config past her bound over HTTP = %+v, want -32000 naming a2a_push_caller_max_configs", e)
		}
		list, err := alice.ListTaskPushConfig(bounded(t), &a2a.ListTaskPushConfigParams{TaskID: second.ID})
		if err != nil || len(list) != 1 {
			t.Errorf("alice's configs of her second task = %s, %v; want the one she set within her bound", jsonOf(list), err)
		}
		tk := sendTask(t, bob, send(call("slow", nil), false))
		if err := setPush(t, bob, tk.ID, rcv.url, "b0", "t"); err != nil {
			t.Errorf("bob's push config while alice is at her bound = %v, want it set", err)
		}
	})

	t.Run("bytes", func(t *testing.T) {
		tk := sendTask(t, carol, send(call("slow", nil), false))
		token := strings.Repeat("x", toolbusa2a.MaxPushTokenBytes)
		for i := range 2 {
			if err := setPush(t, carol, tk.ID, rcv.url, fmt.Sprint("big", i), token); err != nil {
				t.Fatalf("carol's push config %d with a token of %d bytes: %v", i+1, len(token), err)
			}
		}
		e := postA2A(t, c, "carol-key", setBody(tk.ID, "big2", rcv.url, token))
		if e.Code != -32000 || !e.names("a2a_push_caller_max_bytes") {
			t.Errorf("carol's push config past her bytes = %+v, want -32000 naming a2a_push_caller_max_bytes", e)
		}
		if err := setPush(t, bob, tk.ID, rcv.url, "b1", "t"); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Errorf("bob's push config of carol's task = %v, want %v", err, a2a.ErrTaskNotFound)
		}
	})

	t.Run("credentials", func(t *testing.T) {
		tk := sendTask(t, bob, send(call("slow", nil), false))
		for _, tc := range []struct {
			name  string
			creds int
			want  error
		}{
			{"at the limit", toolbusa2a.MaxPushCredentialsBytes - len("Bearer"), nil},
			{"over the limit", toolbusa2a.MaxPushCredentialsBytes, a2a.ErrInvalidParams},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := bob.SetTaskPushConfig(bounded(t), &a2a.TaskPushConfig{TaskID: tk.ID, Config: a2a.PushConfig{
					ID: tc.name, URL: rcv.url, Auth: &a2a.PushAuthInfo{Schemes: []string{"Bearer"}, Credentials: strings.Repeat("c", tc.creds)}}})
				if !errors.Is(err, tc.want) {
					t.Errorf("bob's push config with %d bytes of credentials = %v, want %v", tc.creds, err, tc.want)
				}
			})
		}
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tasks/pushNotificationConfig/set","params":{"taskId":%q,"pushNotificationConfig":{"url":%q,"authentication":{"schemes":["Bearer"],"credentials":%q}}}}`,
			tk.ID, rcv.url, strings.Repeat("c", 4000))
		if e := postA2A(t, c, "bob-key", body); e.Code != -32602 || !e.names("max_push_credentials_bytes") {
			t.Errorf("4000 bytes of credentials = %+v, want -32602 naming max_push_credentials_bytes", e)
		}
	})
}

// TestPushRefusedSendMakesNoTask checks that a message/send or
// message/stream whose push config cannot be kept is refused before its
// task exists: no job is made, so a client that sends it again runs it
// once; and that once a task is final, its configs give their room to
// new ones.
func TestPushRefusedSendMakesNoTask(t *testing.T) {
	g := newGate()
	c := limited(t, g)
	rcv := newReceiver(t)
	alice := client(t, c.BaseURL, "alice-key")
	withPush := func(id string) *a2a.MessageSendParams {
		p := send(call("echo", map[string]any{"n": 1}), false)
		p.Config.PushConfig = &a2a.PushConfig{ID: id, URL: rcv.url}
		return p
	}
	tk := sendTask(t, alice, send(call("slow", nil), false))
	for i := range testMaxConfigs {
		if err := setPush(t, alice, tk.ID, rcv.url, fmt.Sprint("c", i), "t"); err != nil {
			t.Fatalf("alice's push config %d: %v", i+1, err)
		}
	}
	before := jobIDs(t, c, "alice-key")

	if res, err := alice.SendMessage(bounded(t), withPush("send")); !errors.Is(err, a2a.ErrServerError) {
		t.Errorf("message/send with a push config past alice's bound = %s, %v; want %v", jsonOf(res), err, a2a.ErrServerError)
	}
	for ev, err := range alice.SendStreamingMessage(bounded(t), withPush("stream")) {
		if !errors.Is(err, a2a.ErrServerError) {
			t.Errorf("message/stream with a push config past alice's bound = %s, %v; want %v", jsonOf(ev), err, a2a.ErrServerError)
		}
		break
	}
	if after := jobIDs(t, c, "alice-key"); !slices.Equal(after, before) {
		t.Errorf("alice's jobs after the refused sends = %q, want them unchanged: %q", after, before)
	}
	sent := `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"configuration":{"blocking":false,"pushNotificationConfig":{"url":"` + rcv.url +
		`"}},"message":{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"data","data":{"method":"echo","params":{}}}]}}}`
	if e := postA2A(t, c, "alice-key", sent); e.Code != -32000 || !e.names("a2a_push_caller_max_configs") {
		t.Errorf("message/send past alice's bound over HTTP = %+v, want -32000 naming a2a_push_caller_max_configs", e)
	}

	g.open()
	toolbustest.Eventually(t, func() bool {
		got, err := alice.GetTask(bounded(t), &a2a.TaskQueryParams{ID: tk.ID})
		return err == nil && got.Status.State.Terminal()
	}, "alice's first task ends")
	var next *a2a.Task
	toolbustest.Eventually(t, func() bool {
		res, err := alice.SendMessage(bounded(t), withPush("after"))
		next, _ = res.(*a2a.Task)
		return err == nil && next != nil
	}, "a message/send with a push config is taken once the configs of alice's final task give their room")
	if list, err := alice.ListTaskPushConfig(bounded(t), &a2a.ListTaskPushConfigParams{TaskID: next.ID}); err != nil || len(list) != 1 || list[0].Config.ID != "after" {
		t.Errorf("configs of the task sent with one = %s, %v; want the one it was sent with", jsonOf(list), err)
	}
	if after := jobIDs(t, c, "alice-key"); len(after) != len(before)+1 {
		t.Errorf("alice's jobs = %q, want those before the refused sends and one more", after)
	}
}

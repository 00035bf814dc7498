package clientcli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"
	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/worker/a2abridge"
)

// defaultA2AURL is the A2A endpoint of `toolbus dev` with its default
// --listen.
const defaultA2AURL = "http://127.0.0.1:8080/a2a"

func newA2ACmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "a2a",
		Short: "Talk to an A2A (Agent2Agent) agent, such as the ingress's /a2a front door",
		Long: `a2a speaks the JSON-RPC binding of the Agent2Agent protocol to an agent: the
ingress's front door at /a2a, or any other A2A agent. A worker serves a remote
agent's skills as toolbus methods with toolbus worker --a2a-url.`,
	}
	cmd.AddCommand(newA2ASendCmd())
	return cmd
}

// a2aSend is what a2a send sends and how.
type a2aSend struct {
	url      string
	method   string
	params   string
	data     string
	skill    string
	token    string
	interval time.Duration
}

func newA2ASendCmd() *cobra.Command {
	var s a2aSend
	cmd := &cobra.Command{
		Use:   "send [TEXT]",
		Short: "Send a message to an A2A agent, follow its task, and print its artifacts",
		Long: `send sends one message (message/stream when the agent's card says it can
stream, else message/send followed by tasks/get every --interval) and shows the
task's state and status message as jobs watch shows a job's, until the task
ends. Then it prints the result: the data of a single data part, the text of
text parts, else the parts. The exit status is 1 when the task failed, was
rejected or canceled, or stopped for input. Interrupting send (Ctrl-C) cancels
the task.

The message holds TEXT as a text part, and a data part: --data as it is, or,
with --method, {"method": METHOD, "params": PARAMS} (how the ingress's /a2a
front door picks a tool). --skill names a skill in the message's metadata.
The agent's card is read at /.well-known/agent-card.json on --url's host.`,
		Example: `  toolbus a2a send --method echo --params '{"hello":"a2a"}'
  toolbus a2a send --url http://127.0.0.1:9000/a2a "What is the weather in Paris?"
  toolbus a2a send --skill summarize --data '{"url":"https://example.com"}'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			msg, err := s.message(args)
			if err != nil {
				return err
			}
			if s.interval <= 0 {
				return fmt.Errorf("--interval %s: must be positive", s.interval)
			}
			ctx, stop := signal.NotifyContext(CommandContext(cmd), os.Interrupt)
			defer stop()
			return s.run(ctx, cmd.OutOrStdout(), msg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&s.url, "url", defaultA2AURL, "URL of the agent's A2A JSON-RPC endpoint")
	f.StringVar(&s.method, "method", "", "toolbus method the front door should call: sends a data part {\"method\", \"params\"}")
	f.StringVar(&s.params, "params", "", "with --method, the call's params: a JSON object or array")
	f.StringVar(&s.data, "data", "", "a JSON object sent as a data part")
	f.StringVar(&s.skill, "skill", "", "skill named in the message's metadata")
	f.StringVar(&s.token, "token", "", "bearer token sent to the agent (prefer the environment variable: a flag shows in the process list)")
	f.DurationVar(&s.interval, "interval", a2abridge.DefaultPollInterval, "how often the task is read when the agent cannot stream")
	return cmd
}

// message is the message of the command's flags and args.
func (s *a2aSend) message(args []string) (*a2a.Message, error) {
	var parts []a2a.Part
	if len(args) == 1 {
		parts = append(parts, a2a.TextPart{Text: args[0]})
	}
	switch {
	case s.method != "" && s.data != "":
		return nil, errors.New("give --method or --data, not both")
	case s.params != "" && s.method == "":
		return nil, errors.New("--params needs --method")
	case s.method != "":
		data := map[string]any{"method": s.method}
		if s.params != "" {
			p, err := parseParams([]string{s.params})
			if err != nil {
				return nil, fmt.Errorf("--params: %w", err)
			}
			var v any
			if err := decodeNumbers(p, &v); err != nil {
				return nil, fmt.Errorf("--params: %w", err)
			}
			data["params"] = v
		}
		parts = append(parts, a2a.DataPart{Data: data})
	case s.data != "":
		var data map[string]any
		if err := decodeNumbers([]byte(s.data), &data); err != nil || data == nil {
			return nil, fmt.Errorf("--data must be a JSON object, got %s", s.data)
		}
		parts = append(parts, a2a.DataPart{Data: data})
	}
	if len(parts) == 0 {
		return nil, errors.New("nothing to send: give a TEXT, --data or --method")
	}
	msg := a2a.NewMessage(a2a.MessageRoleUser, parts...)
	if s.skill != "" {
		msg.Metadata = map[string]any{a2abridge.SkillMetadataKey: s.skill}
	}
	return msg, nil
}

// decodeNumbers decodes raw into v keeping numbers as they are spelled.
func decodeNumbers(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(v)
}

// run sends msg, shows the task's progress on out and prints its outcome.
func (s *a2aSend) run(ctx context.Context, out io.Writer, msg *a2a.Message) error {
	u, err := url.Parse(s.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--url %q: want the http:// or https:// URL of an A2A JSON-RPC endpoint", s.url)
	}
	tr := &http.Transport{Proxy: http.ProxyFromEnvironment}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	headers := a2abridge.Headers{}
	if s.token != "" {
		headers["Authorization"] = []string{"Bearer " + s.token}
	}
	c, err := a2aclient.NewFromEndpoints(ctx, []a2a.AgentInterface{{Transport: a2a.TransportProtocolJSONRPC, URL: s.url}},
		a2aclient.WithDefaultsDisabled(), a2aclient.WithJSONRPCTransport(hc),
		a2aclient.WithConfig(a2aclient.Config{Polling: true}), a2aclient.WithInterceptors(headers))
	if err != nil {
		return fmt.Errorf("--url %s: %w", s.url, err)
	}
	d := newProgressDisplay(out)
	var task a2a.TaskID
	o, err := a2abridge.Follow(ctx, c, msg, a2abridge.FollowOptions{
		Streaming:    canStream(ctx, hc, u),
		PollInterval: s.interval,
		OnUpdate: func(up a2abridge.Update) {
			if task == "" {
				task = up.TaskID
				fmt.Fprintln(out, "task", task)
			}
			percent := 0.0
			if up.State == a2a.TaskStateCompleted {
				percent = 100
			}
			d.show(statusLine(string(up.State), percent, up.Message))
		},
	})
	d.end()
	if err != nil {
		if errors.Is(err, a2a.ErrMethodNotFound) {
			return fmt.Errorf("send to %s: %w (is --url, or $TOOLBUS_A2A_SEND_URL, an A2A endpoint such as the ingress's /a2a rather than /rpc?)", s.url, err)
		}
		return fmt.Errorf("send to %s: %w", s.url, err)
	}
	if o.Task != nil && o.Task.Status.State != a2a.TaskStateCompleted {
		fmt.Fprintf(out, "task %s %s", o.Task.ID, o.Task.Status.State)
		if text := a2abridge.Text(o.Task.Status.Message); text != "" {
			fmt.Fprintf(out, ": %s", text)
		}
		fmt.Fprintln(out)
		return ErrReported
	}
	result, err := a2abridge.Result(o)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "result:")
	return printJSON(out, result)
}

// canStream reports whether the card of the agent at u says it can
// stream. An agent whose card cannot be read is polled, which every agent
// allows.
func canStream(ctx context.Context, hc *http.Client, u *url.URL) bool {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	card, err := agentcard.NewResolver(hc).Resolve(ctx, u.Scheme+"://"+u.Host)
	return err == nil && card.Capabilities.Streaming
}

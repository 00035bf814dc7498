package clientcli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/discovery"
)

// toolsWait bounds an rpc.discover call of the tools command.
const toolsWait = 30 * time.Second

func newToolsCmd() *cobra.Command {
	var url string
	cmd := &cobra.Command{
		Use:   "tools",
		Short: "List the live tools of a cluster with their worker counts and params",
		Long: `tools asks an ingress for rpc.discover, the OpenRPC document of the tools its
workers announce, and prints one line per method: its name, how many workers
serve it, a summary of its params (a trailing ? marks an optional member) and
its description; then any broken or conflicting descriptors. The ingress must
run with --discovery (the default).`,
		Example: `  toolbus tools
  toolbus tools show math.add`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			doc, err := discover(CommandContext(cmd), url)
			if err != nil {
				return err
			}
			printTools(cmd.OutOrStdout(), doc)
			return nil
		},
	}
	cmd.PersistentFlags().StringVar(&url, "url", defaultURL, "URL of the ingress's JSON-RPC endpoint: http(s):// or ws(s)://")
	cmd.AddCommand(&cobra.Command{
		Use:   "show METHOD",
		Short: "Print the full descriptor of one live method",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			doc, err := discover(CommandContext(cmd), url)
			if err != nil {
				return err
			}
			i := slices.IndexFunc(doc.Methods, func(m discovery.OpenRPCMethod) bool { return m.Name == args[0] })
			if i < 0 {
				return fmt.Errorf("no live method %q (toolbus tools lists them)", args[0])
			}
			b, err := json.MarshalIndent(doc.Methods[i], "", "  ")
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), string(b))
			return nil
		},
	})
	return cmd
}

// discover calls rpc.discover.
func discover(ctx context.Context, url string) (discovery.OpenRPC, error) {
	ctx, cancel := context.WithTimeout(ctx, toolsWait)
	defer cancel()
	var doc discovery.OpenRPC
	c, err := dial(ctx, url)
	if err != nil {
		return doc, err
	}
	defer c.Close()
	if err := c.Call(ctx, discovery.Method, nil, &doc); err != nil {
		return doc, fmt.Errorf("%s: %w", discovery.Method, err)
	}
	return doc, nil
}

func printTools(out io.Writer, doc discovery.OpenRPC) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "METHOD\tWORKERS\tPARAMS\tDESCRIPTION")
	for _, m := range doc.Methods {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", m.Name, m.X.Workers, printable(paramsSummary(m)), printable(firstLine(m.Description)))
	}
	tw.Flush()
	for _, p := range doc.Problems {
		fmt.Fprintf(out, "%s %s (workers %s): %s\n", p.Kind, p.Method, printable(strings.Join(p.Workers, ", ")), printable(p.Reason))
	}
}

// paramsSummary names the params and their types: "a:integer, b?:string".
func paramsSummary(m discovery.OpenRPCMethod) string {
	if len(m.Params) == 0 {
		if len(m.X.ParamsSchema) == 0 {
			return "any"
		}
		return "see show"
	}
	parts := make([]string, len(m.Params))
	for i, p := range m.Params {
		var s struct {
			Type any `json:"type"`
		}
		_ = json.Unmarshal(p.Schema, &s) // a schema without a type is shown as any
		typ := "any"
		if s.Type != nil {
			typ = fmt.Sprint(s.Type)
		}
		name := p.Name
		if !p.Required {
			name += "?"
		}
		parts[i] = name + ":" + typ
	}
	return strings.Join(parts, ", ")
}

// printable drops the control characters of s, text a worker announced,
// so that it cannot move the cursor, clear the screen or forge lines on
// the operator's terminal.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, s)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

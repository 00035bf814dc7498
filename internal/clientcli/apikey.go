package clientcli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/internal/authfile"
	"github.com/toolbus/toolbus/schema"
)

type apiKeyFlags struct {
	allow    []string
	operator bool
	authFile string
}

func newAPIKeyCmd() *cobra.Command {
	var f apiKeyFlags
	cmd := &cobra.Command{
		Use:   "api-key NAME",
		Short: "Make an API key for a caller and add its digest to an --auth-file",
		Long: `api-key makes a new API key for the caller NAME and prints it once: keep it,
as it is stored nowhere. The ingress is given only its SHA-256 digest: with
--auth-file the entry {"name","sha256","allow","operator"} is added to that
file (made when missing, mode 0600; other members are kept), otherwise the
entry is printed for you to add. A name already in the file is refused:
remove its entry first to replace its key.`,
		Example: `  toolbus api-key agent-7 --allow 'echo' --allow 'math.*' --auth-file keys.json
  toolbus ingress --auth-file keys.json ...`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.run(cmd.OutOrStdout(), args[0])
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&f.allow, "allow", nil, "method pattern the caller may call (repeat it, or separate with commas); none means it may call nothing but what the file's default_allow gives")
	fl.BoolVar(&f.operator, "operator", false, "make the key an operator's: it sees every caller's data on the dashboard")
	fl.StringVar(&f.authFile, "auth-file", "", "the --auth-file of the ingress to add the key's digest to")
	return cmd
}

func (f *apiKeyFlags) run(out io.Writer, name string) error {
	if name == "" {
		return errors.New("the caller's name is empty: give the name its calls are counted and allowed under")
	}
	for _, p := range f.allow {
		if err := schema.ValidatePattern(p); err != nil {
			return fmt.Errorf("--allow %q is not a method pattern: %w", p, err)
		}
	}
	key := auth.NewAPIKey()
	entry := authfile.Key{Name: name, SHA256: auth.HashAPIKey(key), Allow: f.allow, Operator: f.operator}
	if entry.Allow == nil {
		entry.Allow = []string{}
	}
	if f.authFile == "" {
		b, err := json.Marshal(entry)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "API key of %s (shown once, stored nowhere):\n  %s\nits entry for the \"keys\" of an --auth-file:\n  %s\n", name, key, b)
		return nil
	}
	if err := authfile.AddKey(f.authFile, entry); err != nil {
		return err
	}
	fmt.Fprintf(out, "API key of %s (shown once, stored nowhere):\n  %s\nits digest was added to %s; send it as the %s header or as a bearer token\n", name, key, f.authFile, auth.APIKeyHeader)
	return nil
}

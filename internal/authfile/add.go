package authfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/toolbus/toolbus/internal/cause"
)

// AddKey adds entry to the keys of the auth file at path, keeping every
// other member as it is, and writes the file anew (mode 0600) through a
// temporary file, so that a failure leaves the old file whole.
func AddKey(path string, entry Key) error {
	doc := map[string]json.RawMessage{}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("cannot read --auth-file %s: %w", path, err)
	default:
		if err := json.Unmarshal(b, &doc); err != nil {
			return fmt.Errorf("--auth-file %s is not a JSON object (%v): fix it, or name a new file", path, err)
		}
	}
	var keys []json.RawMessage
	if raw, ok := doc["keys"]; ok {
		if err := json.Unmarshal(raw, &keys); err != nil {
			return fmt.Errorf("the keys of --auth-file %s are not a JSON array (%v): fix it, or name a new file", path, err)
		}
	}
	for _, k := range keys {
		var e Key
		if json.Unmarshal(k, &e) == nil && e.Name == entry.Name {
			return fmt.Errorf("--auth-file %s already has a key of %s: remove its entry first to replace its key, or choose another name", path, entry.Name)
		}
	}
	e, err := json.Marshal(entry)
	if err != nil {
		return err
	}
	keys = append(keys, e)
	if doc["keys"], err = json.Marshal(keys); err != nil {
		return err
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	buf.Write(out)
	buf.WriteByte('\n')
	tmp, err := os.CreateTemp(filepath.Dir(path), ".auth-file-*")
	if err != nil {
		return fmt.Errorf("cannot write --auth-file %s (%v): give a path in a directory this user can write", path, cause.Root(err))
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		tmp.Close()
		return fmt.Errorf("cannot write --auth-file %s: %w", path, err)
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("cannot write --auth-file %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("cannot write --auth-file %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("cannot write --auth-file %s: %w", path, err)
	}
	return nil
}

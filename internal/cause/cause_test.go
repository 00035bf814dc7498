package cause_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/toolbus/toolbus/internal/cause"
)

func TestRoot(t *testing.T) {
	base := errors.New("base")
	_, statErr := os.Stat(filepath.Join(t.TempDir(), "missing"))
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"nil", nil, nil},
		{"alone", base, base},
		{"wrapped twice", fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", base)), base},
		{"path error", statErr, fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := cause.Root(tt.err)
			if tt.want == fs.ErrNotExist {
				if !errors.Is(got, fs.ErrNotExist) || got.Error() != "no such file or directory" {
					t.Errorf("Root(%v) = %v, want the errno alone", tt.err, got)
				}
				return
			}
			if got != tt.want {
				t.Errorf("Root(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

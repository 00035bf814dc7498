// Package layers holds one test: that the module's packages keep the
// layers ARCHITECTURE.md's table gives them. A package imports only
// packages of lower layers, and the table lists every package, no more.
// The rule covers the files a package is built from, whatever their build
// tags; test files may import anything Go lets them.
package layers

import (
	"bufio"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// tableHeader is the first row of ARCHITECTURE.md's table of packages,
// cell by cell; the table is found by it.
var tableHeader = []string{"layer", "package", "owns"}

func TestLayers(t *testing.T) {
	root, module := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "ARCHITECTURE.md"))
	if err != nil {
		t.Fatalf("read ARCHITECTURE.md: %v", err)
	}
	layers, err := parseTable(string(doc))
	if err != nil {
		t.Fatalf("ARCHITECTURE.md: %v", err)
	}
	imports, err := moduleImports(root, module)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range check(layers, imports) {
		t.Error(p)
	}
}

func TestParseTable(t *testing.T) {
	const header = "| layer | package | owns |\n|---|---|---|\n"
	tests := []struct {
		name    string
		doc     string
		want    map[string]int
		wantErr bool
	}{
		{
			name: "rows up to the end of the table",
			doc: "# Packages\n\n" + header +
				"| 0 | `schema` | the wire |\n| 1 | `bus` | NATS |\n\nA `cmd` | 9 | line after the table.\n",
			want: map[string]int{"schema": 0, "bus": 1},
		},
		{
			name: "rows without trailing pipes and with spaces",
			doc:  header + "|  2 |  `ingress/mcp`  | the MCP door\n",
			want: map[string]int{"ingress/mcp": 2},
		},
		{name: "no table", doc: "# Packages\n\n| package | owns |\n|---|---|\n| `schema` | x |\n", wantErr: true},
		{name: "a layer that is no number", doc: header + "| top | `cmd/toolbus` | x |\n", wantErr: true},
		{name: "a negative layer", doc: header + "| -1 | `schema` | x |\n", wantErr: true},
		{name: "a package not in backquotes", doc: header + "| 0 | schema | x |\n", wantErr: true},
		{name: "a package without its opening backquote", doc: header + "| 0 | schema` | x |\n", wantErr: true},
		{name: "a package listed twice", doc: header + "| 0 | `schema` | x |\n| 1 | `schema` | y |\n", wantErr: true},
		{name: "an empty table", doc: header + "\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseTable(tt.doc)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseTable() error = %v, want error %v", err, tt.wantErr)
			}
			if err == nil && !maps.Equal(got, tt.want) {
				t.Errorf("parseTable() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	layers := map[string]int{"schema": 0, "bus": 1, "worker": 2, "aggregator": 2, "node": 3}
	tests := []struct {
		name    string
		imports map[string][]string
		want    []string // the packages each problem names first, in order
	}{
		{
			name: "every import points down",
			imports: map[string][]string{"schema": nil, "bus": {"schema"}, "worker": {"bus", "schema"},
				"aggregator": {"bus"}, "node": {"worker", "aggregator", "schema"}},
		},
		{
			name: "an import of a higher layer",
			imports: map[string][]string{"schema": {"bus"}, "bus": nil, "worker": nil,
				"aggregator": nil, "node": nil},
			want: []string{"schema"},
		},
		{
			name: "an import within one layer",
			imports: map[string][]string{"schema": nil, "bus": nil, "worker": {"aggregator"},
				"aggregator": nil, "node": nil},
			want: []string{"worker"},
		},
		{
			name: "a package the table does not list",
			imports: map[string][]string{"schema": nil, "bus": nil, "worker": nil, "aggregator": nil,
				"node": nil, "internal/new": {"schema"}},
			want: []string{"internal/new"},
		},
		{
			name:    "a listed package that is gone",
			imports: map[string][]string{"schema": nil, "bus": nil, "worker": nil, "node": nil},
			want:    []string{"aggregator"},
		},
		{
			name: "an import of an unlisted package is the missing row alone",
			imports: map[string][]string{"schema": nil, "bus": {"internal/new"}, "worker": nil,
				"aggregator": nil, "node": nil, "internal/new": nil},
			want: []string{"internal/new"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := check(layers, tt.imports)
			var firsts []string
			for _, p := range got {
				first, _, _ := strings.Cut(p, " ")
				firsts = append(firsts, first)
			}
			if !slices.Equal(firsts, tt.want) {
				t.Errorf("check() = %q, want problems about %q", got, tt.want)
			}
		})
	}
}

// check returns a sentence for each way imports (each package of the
// module and the module's packages it imports) breaks the layers of the
// table: a package the table does not list, a row of a package that is
// gone, and an import of a package that does not sit in a lower layer.
// Each sentence starts with the package it is about.
func check(layers map[string]int, imports map[string][]string) []string {
	var problems []string
	for _, pkg := range slices.Sorted(maps.Keys(imports)) {
		if _, ok := layers[pkg]; !ok {
			problems = append(problems, fmt.Sprintf("%s is not in ARCHITECTURE.md's table of packages: "+
				"add a row with the layer it sits in, above every package it imports, and what it owns", pkg))
		}
	}
	for _, pkg := range slices.Sorted(maps.Keys(layers)) {
		if _, ok := imports[pkg]; !ok {
			problems = append(problems, fmt.Sprintf("%s is in ARCHITECTURE.md's table of packages but has no Go "+
				"files other than tests: remove its row, or fix its name", pkg))
		}
	}
	for _, pkg := range slices.Sorted(maps.Keys(imports)) {
		layer, ok := layers[pkg]
		if !ok {
			continue
		}
		for _, dep := range imports[pkg] {
			depLayer, ok := layers[dep]
			if !ok || depLayer < layer {
				continue
			}
			problems = append(problems, fmt.Sprintf("%s (layer %d) imports %s (layer %d), and a package imports only "+
				"packages of lower layers: move what it needs of %s down to a lower layer, or, if %s belongs higher, "+
				"move it up in ARCHITECTURE.md's table", pkg, layer, dep, depLayer, dep, pkg))
		}
	}
	return problems
}

// parseTable returns the layer of every package in doc's table of
// packages: the first table whose header row is [tableHeader], each row
// a layer (a number from 0), one package path relative to the module in
// backquotes, and what the package owns.
func parseTable(doc string) (map[string]int, error) {
	lines := strings.Split(doc, "\n")
	start := -1
	for i, line := range lines {
		if slices.Equal(cells(line), tableHeader) {
			start = i + 2 // past the header and its separator row
			break
		}
	}
	if start < 0 {
		return nil, fmt.Errorf("no table of packages: its header row must be | %s |", strings.Join(tableHeader, " | "))
	}
	layers := map[string]int{}
	for i := start; i < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i]), "|"); i++ {
		row := cells(lines[i])
		if len(row) < 2 {
			return nil, fmt.Errorf("line %d: a row of the table of packages needs a layer and a package", i+1)
		}
		layer, err := strconv.Atoi(row[0])
		if err != nil || layer < 0 {
			return nil, fmt.Errorf("line %d: the layer %q is not a number from 0 up", i+1, row[0])
		}
		pkg, opened := strings.CutPrefix(row[1], "`")
		pkg, closed := strings.CutSuffix(pkg, "`")
		if !opened || !closed || pkg == "" || strings.Contains(pkg, "`") {
			return nil, fmt.Errorf("line %d: the package %q must be one path in backquotes, such as `schema`", i+1, row[1])
		}
		if _, dup := layers[pkg]; dup {
			return nil, fmt.Errorf("line %d: %s is listed twice; keep one row", i+1, pkg)
		}
		layers[pkg] = layer
	}
	if len(layers) == 0 {
		return nil, errors.New("the table of packages has no rows")
	}
	return layers, nil
}

// cells returns the trimmed cells of a Markdown table row, nil for a line
// that is not one.
func cells(line string) []string {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "|") {
		return nil
	}
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	out := strings.Split(line, "|")
	for i := range out {
		out[i] = strings.TrimSpace(out[i])
	}
	return out
}

// moduleRoot returns the directory of the go.mod above the test and the
// module path it declares.
func moduleRoot(t *testing.T) (dir, module string) {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		f, err := os.Open(filepath.Join(dir, "go.mod"))
		if err == nil {
			defer f.Close()
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if m := moduleLine.FindStringSubmatch(sc.Text()); m != nil {
					return dir, m[1]
				}
			}
			t.Fatalf("%s has no module line", f.Name())
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

var moduleLine = regexp.MustCompile(`^module\s+(\S+)`)

// moduleImports returns every package of the module under root (a
// directory with a Go file other than a test, whatever its build tags,
// skipping what the go command skips: testdata, and names starting with
// "." or "_", and other modules), each with the packages of the module
// its files import, as paths relative to root.
func moduleImports(root, module string) (map[string][]string, error) {
	imports := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path == root {
				return nil
			}
			if name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") ||
			strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(rel)
		deps := imports[pkg]
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return fmt.Errorf("%s: import %s: %w", path, imp.Path.Value, err)
			}
			dep, ok := strings.CutPrefix(p, module+"/")
			if !ok || slices.Contains(deps, dep) {
				continue
			}
			deps = append(deps, dep)
		}
		imports[pkg] = deps
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the module's imports: %w", err)
	}
	for _, deps := range imports {
		slices.Sort(deps)
	}
	return imports, nil
}

package yamlpos

import (
	"testing"

	yaml "go.yaml.in/yaml/v3"
)

// TestLocate: the line and column where the fix belongs.
func TestLocate(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		line, col  int
	}{
		{"unclosed brace", "a:\n  b: x\nc: {d: \"e\"\nf: {g: h}\n", 3, 4},
		{"unclosed quote", "a:\n  b: \"x\nc: {d: y}\n", 2, 6},
		{"an apostrophe is not a quote", "a:\n  b: [it's, here\n", 2, 6},
		{"bad indentation", "a:\n  b: x\n   c: y\n", 3, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n yaml.Node
			err := yaml.Unmarshal([]byte(tc.text), &n)
			if err == nil {
				t.Fatal("valid YAML")
			}
			if p := Locate([]byte(tc.text), err); p.Line != tc.line || p.Column != tc.col || p.Msg == "" {
				t.Fatalf("%+v, want line %d column %d", p, tc.line, tc.col)
			}
		})
	}
	if got := Column("  k: {a: [1, 2], b: «x»"); got != 6 {
		t.Fatalf("column counts runes: got %d, want 6", got)
	}
}

func FuzzColumn(f *testing.F) {
	for _, s := range []string{"a: {b: [c", `a: "x\"`, "'", "«»{", "# {"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if c := Column(line); c < 1 || c > len(line)+1 {
			t.Fatalf("Column(%q) = %d, outside the line", line, c)
		}
	})
}

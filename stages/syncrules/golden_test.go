package syncrules

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/syncpipe/syncpipe/model"
)

// The golden corpus: (rules, row) → expected buckets/data, and (rules,
// request) → expected buckets/lookups, written by hand from PowerSync's
// documented semantics (testdata/golden/*.yaml).

type goldenFile struct {
	Rules    string              `yaml:"rules"`
	Group    string              `yaml:"group"`
	Tables   map[string][]string `yaml:"tables"`
	Rows     []goldenRow         `yaml:"rows"`
	Requests []goldenRequest     `yaml:"requests"`
}

type goldenRow struct {
	Name    string         `yaml:"name"`
	Table   string         `yaml:"table"`
	Row     yaml.Node      `yaml:"row"`
	Want    []goldenOutput `yaml:"want"`
	Lookups []goldenLookup `yaml:"lookups"`
	Error   bool           `yaml:"error"`
}

type goldenOutput struct {
	Bucket   string `yaml:"bucket"`
	Type     string `yaml:"type"`
	ID       string `yaml:"id"`
	Data     string `yaml:"data"`
	Priority *int   `yaml:"priority"`
}

type goldenLookup struct {
	Key  string `yaml:"key"`
	Rows string `yaml:"rows"`
}

type goldenRequest struct {
	Name       string          `yaml:"name"`
	UserID     string          `yaml:"user_id"`
	Claims     string          `yaml:"claims"`
	Parameters string          `yaml:"parameters"`
	Static     []goldenBucket  `yaml:"static"`
	Lookups    []string        `yaml:"lookups"`
	Resolve    []goldenResolve `yaml:"resolve"`
}

type goldenResolve struct {
	Key     string         `yaml:"key"`
	Rows    string         `yaml:"rows"`
	Buckets []goldenBucket `yaml:"buckets"`
}

// goldenBucket is either a bucket id string or {bucket, priority}.
type goldenBucket struct {
	Bucket   string
	Priority int
}

func (b *goldenBucket) UnmarshalYAML(n *yaml.Node) error {
	b.Priority = 3
	if n.Kind == yaml.ScalarNode {
		b.Bucket = n.Value
		return nil
	}
	var m struct {
		Bucket   string `yaml:"bucket"`
		Priority int    `yaml:"priority"`
	}
	if err := n.Decode(&m); err != nil {
		return err
	}
	b.Bucket, b.Priority = m.Bucket, m.Priority
	return nil
}

// rowValues converts a YAML sequence into rule values by tag: str → TEXT,
// int → INTEGER, float → REAL, null → NULL, bool → 1/0, binary → BLOB.
func rowValues(t *testing.T, n *yaml.Node) []model.Value {
	t.Helper()
	var out []model.Value
	for _, el := range n.Content {
		switch el.Tag {
		case "!!null":
			out = append(out, model.Null())
		case "!!int":
			var i int64
			if err := el.Decode(&i); err != nil {
				t.Fatal(err)
			}
			out = append(out, model.Int(i))
		case "!!float":
			var f float64
			if err := el.Decode(&f); err != nil {
				t.Fatal(err)
			}
			out = append(out, model.Real(f))
		case "!!bool":
			out = append(out, model.Bool(el.Value == "true"))
		case "!!binary":
			b, err := base64.StdEncoding.DecodeString(el.Value)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, model.Blob(b))
		default:
			out = append(out, model.Text(el.Value))
		}
	}
	return out
}

func TestGoldenCorpus(t *testing.T) {
	files, _ := filepath.Glob("testdata/golden/*.yaml")
	if len(files) == 0 {
		t.Fatal("no golden files")
	}
	total := 0
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var g goldenFile
		if err := yaml.Unmarshal(raw, &g); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if g.Group == "" {
			g.Group = "1"
		}
		rules, err := Parse([]byte(g.Rules), Options{File: filepath.Base(file), GroupID: g.Group})
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		evs := map[string]*Evaluator{}
		for name, cols := range g.Tables {
			bt, err := rules.Bind(name, cols)
			if err != nil {
				t.Fatal(err)
			}
			evs[name] = bt.NewEvaluator()
		}
		for _, c := range g.Rows {
			total++
			t.Run(filepath.Base(file)+"/"+c.Name, func(t *testing.T) { checkGoldenRow(t, evs, c) })
		}
		for _, c := range g.Requests {
			total++
			t.Run(filepath.Base(file)+"/"+c.Name, func(t *testing.T) { checkGoldenRequest(t, rules, c) })
		}
	}
	if total < 40 {
		t.Errorf("golden corpus has %d cases, want at least 40", total)
	}
}

func checkGoldenRow(t *testing.T, evs map[string]*Evaluator, c goldenRow) {
	ev := evs[c.Table]
	if ev == nil {
		t.Fatalf("unknown table %s", c.Table)
	}
	row := rowValues(t, &c.Row)
	out, _, err := ev.EvaluateRow(row, nil, nil)
	if c.Error != (err != nil) {
		t.Errorf("error = %v, want error: %v", err, c.Error)
	}
	var got, want []string
	for _, o := range out {
		got = append(got, strings.Join([]string{o.Bucket, o.ObjectType, o.ObjectID, string(o.Data), itoa(o.Priority)}, " | "))
	}
	for _, w := range c.Want {
		p := 3
		if w.Priority != nil {
			p = *w.Priority
		}
		want = append(want, strings.Join([]string{w.Bucket, w.Type, w.ID, w.Data, itoa(p)}, " | "))
	}
	if !slices.Equal(got, want) {
		t.Errorf("outputs:\n got  %s\n want %s", strings.Join(got, "\n      "), strings.Join(want, "\n      "))
	}
	le, _, err := ev.EvaluateParameterRow(row, nil, nil)
	if err != nil {
		t.Errorf("parameter row error: %v", err)
	}
	var gotL, wantL []string
	for _, l := range le {
		gotL = append(gotL, string(l.Key)+" "+string(l.Rows))
	}
	for _, l := range c.Lookups {
		wantL = append(wantL, l.Key+" "+l.Rows)
	}
	if !slices.Equal(gotL, wantL) {
		t.Errorf("lookups:\n got  %q\n want %q", gotL, wantL)
	}
}

func checkGoldenRequest(t *testing.T, rules *Rules, c goldenRequest) {
	plan, err := rules.Request(Request{UserID: c.UserID, Claims: []byte(c.Claims), Parameters: []byte(c.Parameters)})
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	if got, want := bucketStrings(plan.Static), goldenStrings(c.Static); !slices.Equal(got, want) {
		t.Errorf("static:\n got  %q\n want %q", got, want)
	}
	var keys []string
	for _, l := range plan.Lookups {
		keys = append(keys, string(l.Key))
	}
	if !slices.Equal(keys, c.Lookups) {
		t.Errorf("lookups:\n got  %q\n want %q", keys, c.Lookups)
	}
	for _, r := range c.Resolve {
		i := slices.Index(keys, r.Key)
		if i < 0 {
			t.Errorf("resolve: no lookup %s", r.Key)
			continue
		}
		got, err := plan.Lookups[i].Buckets([]byte(r.Rows), nil)
		if err != nil {
			t.Errorf("resolve %s: %v", r.Key, err)
		}
		if g, w := bucketStrings(got), goldenStrings(r.Buckets); !slices.Equal(g, w) {
			t.Errorf("resolve %s:\n got  %q\n want %q", r.Key, g, w)
		}
	}
}

func bucketStrings(bs []BucketRef) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.ID+" p"+itoa(b.Priority))
	}
	return out
}

func goldenStrings(bs []goldenBucket) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.Bucket+" p"+itoa(b.Priority))
	}
	return out
}

func itoa(i int) string { return string(rune('0' + i)) }

package config_test

import (
	"go/ast"
	"go/types"
	"reflect"
	"slices"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
)

// allowedUnread are documented keys no production code reads yet, each with
// the work that wires it. Nothing else may be unread.
var allowedUnread = map[string]string{}

// accessors are the methods of package config that production code calls
// to read a key instead of selecting its field; the fields they select
// count as read. (Other code in package config — defaults, validation, the
// resolution of pipelines — does not: it moves values between keys.)
var accessors = []string{"(SyncRules).Read"}

// TestEveryKeyHasAReader fails for a documented config key (a leaf of the
// Config struct tree) that no production code outside package config
// reads: a knob that does nothing when a user sets it. It type-checks the
// module's production packages (no tests, no benchmarks) and collects the
// struct fields their selectors reach, so a test that reads a field
// cannot make a key look used. A section key that pipelines inherit (see
// the default tags of config.Stages and config.PipelineSource) is read when
// the pipeline setting inheriting it is.
func TestEveryKeyHasAReader(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the whole module")
	}
	pkgs, err := packages.Load(&packages.Config{
		Mode: packages.NeedName | packages.NeedTypes | packages.NeedTypesInfo | packages.NeedSyntax | packages.NeedImports | packages.NeedDeps,
		Dir:  "..",
	}, "github.com/syncpipe/syncpipe/...")
	if err != nil {
		t.Fatal(err)
	}
	var cfgPkg *types.Package
	read := map[*types.Var]bool{}
	for _, p := range pkgs {
		if len(p.Errors) > 0 {
			t.Fatalf("load %s: %v", p.PkgPath, p.Errors)
		}
		if p.PkgPath == "github.com/syncpipe/syncpipe/config" {
			cfgPkg = p.Types
			accessorReads(p, read)
			continue
		}
		if strings.HasPrefix(p.PkgPath, "github.com/syncpipe/syncpipe/benchmarks") {
			continue
		}
		for _, sel := range p.TypesInfo.Selections {
			if v, ok := sel.Obj().(*types.Var); ok && v.IsField() {
				read[v] = true
			}
		}
	}
	if cfgPkg == nil {
		t.Fatal("package config not loaded")
	}
	root := cfgPkg.Scope().Lookup("Config").Type()
	// A pipeline setting that inherits a section key (its default tag names
	// it) reads that key for every pipeline that does not set its own.
	isRead := map[string]bool{}
	var leaves []string
	var walk func(path string, t types.Type)
	walk = func(path string, typ types.Type) {
		st, ok := typ.Underlying().(*types.Struct)
		if !ok {
			return
		}
		for i := range st.NumFields() {
			f := st.Field(i)
			key := reflect.StructTag(st.Tag(i)).Get("koanf")
			if key == "" {
				continue
			}
			p := strings.TrimPrefix(path+"."+key, ".")
			ft := f.Type()
			if s, ok := ft.Underlying().(*types.Slice); ok {
				if _, isStruct := s.Elem().Underlying().(*types.Struct); isStruct {
					ft, p = s.Elem(), p+"[]"
				}
			}
			if n, ok := ft.(*types.Named); ok && n.Obj().Pkg() == cfgPkg {
				if _, isStruct := n.Underlying().(*types.Struct); isStruct {
					walk(p, n)
					continue
				}
			}
			leaves = append(leaves, p)
			if read[f] {
				isRead[p] = true
				if def := reflect.StructTag(st.Tag(i)).Get("default"); strings.Contains(def, ".") {
					isRead[def] = true
				}
			}
		}
	}
	walk("", root)
	var unread []string
	for _, k := range leaves {
		if !isRead[k] {
			unread = append(unread, k)
		}
	}
	var bad []string
	for _, k := range unread {
		if _, ok := allowedUnread[k]; !ok {
			bad = append(bad, k)
		}
	}
	slices.Sort(bad)
	if len(bad) > 0 {
		t.Errorf("%d documented config keys are read by no production code (wire them or remove them):\n  %s", len(bad), strings.Join(bad, "\n  "))
	}
	for k := range allowedUnread {
		if !slices.Contains(unread, k) {
			t.Errorf("%s is read now: remove it from allowedUnread", k)
		}
	}
}

// accessorReads marks the fields the accessors of package config select.
func accessorReads(p *packages.Package, read map[*types.Var]bool) {
	for _, f := range p.Syntax {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) != 1 {
				continue
			}
			recv := types.ExprString(fd.Recv.List[0].Type)
			if !slices.Contains(accessors, "("+strings.TrimPrefix(recv, "*")+")."+fd.Name.Name) {
				continue
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if se, ok := n.(*ast.SelectorExpr); ok {
					if sel := p.TypesInfo.Selections[se]; sel != nil {
						if v, ok := sel.Obj().(*types.Var); ok && v.IsField() {
							read[v] = true
						}
					}
				}
				return true
			})
		}
	}
}

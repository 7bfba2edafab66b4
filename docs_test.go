package dlock_test

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestDocsNameRealAPI: every identifier of package dlock that README.md,
// the package documentation and docs/*.md name (dlock.X, Locker.X,
// Lease.X, MultiLease.X, and methods called on a locker or a lease in
// their examples) exists. docs/BENCHMARKS.md, a measurement report, is
// left out.
func TestDocsNameRealAPI(t *testing.T) {
	pkg, err := build.ImportDir(".", 0) // the package's files for this build, tests left out
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var srcs []*ast.File
	for _, name := range pkg.GoFiles {
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, f)
	}
	top := map[string]bool{}                // dlock.X
	methods := map[string]map[string]bool{} // Type.X
	for _, f := range srcs {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					top[d.Name.Name] = true
					continue
				}
				typ := d.Recv.List[0].Type
				if s, ok := typ.(*ast.StarExpr); ok {
					typ = s.X
				}
				if id, ok := typ.(*ast.Ident); ok {
					if methods[id.Name] == nil {
						methods[id.Name] = map[string]bool{}
					}
					methods[id.Name][d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						top[s.Name.Name] = true
					case *ast.ValueSpec:
						for _, n := range s.Names {
							top[n.Name] = true
						}
					}
				}
			}
		}
	}
	// Methods of the driver types that dlock re-exports as aliases.
	methods["HeldError"] = map[string]bool{"Error": true, "Is": true, "Unwrap": true}
	files := []string{"README.md", "doc.go"}
	docs, _ := filepath.Glob("docs/*.md")
	for _, d := range docs {
		if filepath.Base(d) != "BENCHMARKS.md" {
			files = append(files, d)
		}
	}
	qualified := regexp.MustCompile(`\bdlock\.([A-Z]\w*)`)
	typed := regexp.MustCompile(`\b(Locker|Lease|MultiLease)\.([A-Z]\w*)`)
	called := regexp.MustCompile(`\b(locker|lease)\.([A-Z]\w*)\(`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, m := range qualified.FindAllStringSubmatch(text, -1) {
			if !top[m[1]] {
				t.Errorf("%s names dlock.%s, which does not exist", f, m[1])
			}
		}
		for _, m := range typed.FindAllStringSubmatch(text, -1) {
			if !methods[m[1]][m[2]] {
				t.Errorf("%s names %s.%s, which does not exist", f, m[1], m[2])
			}
		}
		for _, m := range called.FindAllStringSubmatch(text, -1) {
			typ := map[string]string{"locker": "Locker", "lease": "Lease"}[m[1]]
			if !methods[typ][m[2]] {
				t.Errorf("%s calls %s.%s, which *%s does not have", f, m[1], m[2], typ)
			}
		}
	}
}

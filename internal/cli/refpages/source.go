package refpages

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
)

// Const is a constant as its package's source declares it.
type Const struct {
	Name, Type string
	Value      string // the literal as written: 9, "Pod"
	Doc        string // its doc comment (or line comment), one line
}

// Source is what the reference pages read from a package's source: its constants and the doc
// comments of its struct fields.
type Source struct {
	Consts []Const
	Fields map[string]map[string]string // type → field → doc
}

// ReadSource parses the non-test Go files of dir.
func ReadSource(dir string) (*Source, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	src := &Source{Fields: map[string]map[string]string{}}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range g.Specs {
				switch s := spec.(type) {
				case *ast.ValueSpec:
					if g.Tok != token.CONST || len(s.Names) != 1 || len(s.Values) != 1 {
						continue
					}
					c := Const{Name: s.Names[0].Name, Doc: comment(s.Doc, s.Comment)}
					if id, ok := s.Type.(*ast.Ident); ok {
						c.Type = id.Name
					}
					if lit, ok := s.Values[0].(*ast.BasicLit); ok {
						c.Value = lit.Value
					}
					if c.Doc == "" && len(g.Specs) == 1 {
						c.Doc = comment(g.Doc, nil)
					}
					src.Consts = append(src.Consts, c)
				case *ast.TypeSpec:
					st, ok := s.Type.(*ast.StructType)
					if !ok {
						continue
					}
					fields := map[string]string{}
					for _, fl := range st.Fields.List {
						for _, n := range fl.Names {
							fields[n.Name] = comment(fl.Doc, fl.Comment)
						}
					}
					src.Fields[s.Name.Name] = fields
				}
			}
		}
	}
	return src, nil
}

// Const returns the constant of type typ whose literal is value.
func (s *Source) Const(typ, value string) (Const, bool) {
	for _, c := range s.Consts {
		if c.Type == typ && c.Value == value {
			return c, true
		}
	}
	return Const{}, false
}

// Named returns the constant named name.
func (s *Source) Named(name string) (Const, bool) {
	for _, c := range s.Consts {
		if c.Name == name {
			return c, true
		}
	}
	return Const{}, false
}

// OfType returns the constants of type typ, in the source's order.
func (s *Source) OfType(typ string) []Const {
	var out []Const
	for _, c := range s.Consts {
		if c.Type == typ {
			out = append(out, c)
		}
	}
	return out
}

// comment joins the text of the first non-empty comment group into one line.
func comment(groups ...*ast.CommentGroup) string {
	for _, g := range groups {
		if t := strings.Join(strings.Fields(g.Text()), " "); t != "" {
			return t
		}
	}
	return ""
}

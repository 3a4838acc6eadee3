package docs

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// Code, manifests, help texts and the Makefile cite docs/design.md by section number (the
// word DESIGN, a section sign and the number) and name its invariants (S1, L1, …). These tests
// check that every such citation points at something the document has: a heading numbered so,
// or a list item `- **X1** …` defining the invariant.

// designDoc is the design document, relative to this directory; designRoot is the repository.
const (
	designDoc  = "design.md"
	designRoot = ".."
)

// designSkipDirs are not walked: git's store, build output, and test fixtures (fuzz corpora and
// the like, which are not the project's words; so internal/testenv/testdata/longhorn-crds.yaml's
// one citation is not checked).
var designSkipDirs = map[string]bool{".git": true, "bin": true, "testdata": true, ".cache": true}

// designSelf is this file: its fixtures cite sections and invariants that do not exist.
const designSelf = "docs/design_test.go"

// designScanned reports whether a file's text is searched for citations.
func designScanned(name string) bool {
	switch name {
	case "Makefile", "Dockerfile":
		return true
	}
	switch filepath.Ext(name) {
	case ".go", ".yaml", ".yml", ".tpl", ".md", ".sh", ".txt", ".json":
		return true
	}
	return false
}

var (
	// designHeading is a numbered heading: "## 3. Coordinator", "### 3.12 Leadership".
	designHeading = regexp.MustCompile(`(?m)^(#{1,6})[ \t]+([0-9]+(?:\.[0-9]+)*)\.?[ \t]+\S`)
	// designDefined is a list item that defines an invariant: "- **S1** An agent …".
	designDefined = regexp.MustCompile(`(?m)^[ \t]*[-*][ \t]+\*\*([^*\n]+)\*\*`)
	// designInvariantShape is what an invariant's name looks like (S1, L1, P4, …).
	designInvariantShape = regexp.MustCompile(`^[A-Z]{1,2}[0-9]+[a-z]?$`)

	// designSectionRef is a citation of a section from outside the document: "DESIGN §9",
	// "DESIGN § 4.1", "DESIGN§3".
	designSectionRef = regexp.MustCompile(`DESIGN[ \t]?§[ \t]?([0-9]+(?:\.[0-9]+)*)`)
	// designSelfRef is a cross-reference inside the document: "(§3.9)".
	designSelfRef = regexp.MustCompile(`§[ \t]?([0-9]+(?:\.[0-9]+)*)`)

	// designToken is an invariant-shaped token; designRefsIn skips one that is part of
	// something else ("Core().V1()", "UC3", "K8s", "HTTP2": see designWordByte).
	designToken = regexp.MustCompile(`[A-Z]{1,2}[0-9]+`)

	// designReported is a name a checker of the simulation or the chaos run reports: the first
	// argument of violate, around or violation, an Invariant field, an Inv… constant.
	designReported = regexp.MustCompile(`(?:\bviolate|\baround|\bviolation)\(\s*"([^"\n]+)"|\bInvariant:\s*"([^"\n]+)"|\bInv[A-Z]\w*\s*=\s*"([^"\n]+)"`)
	// designNamedInvariant is prose that names invariants anywhere: "invariant S4",
	// "invariants S1 and S2", "invariants S3–S5", and the simulation's "DESIGN S2".
	designNamedInvariant = regexp.MustCompile(`\b(?:[Ii]nvariants?|DESIGN)[ \t]+([A-Z]{1,2}[0-9]+(?:(?:[ \t]*(?:,|/|-|–|and|or)[ \t]*)[A-Z]{1,2}[0-9]+)*)\b`)
	// designSimCite is the citation of an invariant at the end of a parenthetical about the
	// simulation, on one line: "(simulation, seed 502990, S3)", "(the simulation found it, L1)".
	designSimCite = regexp.MustCompile(`\bsimulation\b[^()\n]*?[(,;][ \t]*([A-Z]{1,2}[0-9]+)[ \t]*[);.,]`)
)

// designTokenInvariantDirs hold the simulation and the chaos run: there, every invariant-shaped
// token names an invariant (their code talks of nothing else with such names).
var designTokenInvariantDirs = []string{"internal/sim/", "internal/chaos/"}

// designFile is one scanned file: its path from the repository's root (slashes) and its text.
type designFile struct {
	Path, Text string
}

// designRef is one citation found in a file.
type designRef struct {
	Path string
	Line int
	// Section is the cited section number; Invariant the cited invariant's name. One is set.
	Section, Invariant string
	// How says how the citation was recognised, for the failure message.
	How string
}

func (r designRef) String() string {
	if r.Section != "" {
		return fmt.Sprintf("%s:%d: %s cites DESIGN §%s", r.Path, r.Line, r.How, r.Section)
	}
	return fmt.Sprintf("%s:%d: %s names invariant %s", r.Path, r.Line, r.How, r.Invariant)
}

// designLines maps byte offsets of a text to line numbers.
type designLines []int

func newDesignLines(text string) designLines {
	starts := designLines{0}
	for i := 0; i < len(text); i++ {
		if text[i] == '\n' {
			starts = append(starts, i+1)
		}
	}
	return starts
}

// at returns the 1-based line of offset off.
func (l designLines) at(off int) int {
	return sort.Search(len(l), func(i int) bool { return l[i] > off })
}

// designWordByte reports whether b joins an invariant-shaped token to a longer word.
func designWordByte(b byte) bool {
	return b == '_' || ('0' <= b && b <= '9') || ('a' <= b && b <= 'z') || ('A' <= b && b <= 'Z')
}

// designRefsIn finds the citations in one file. Which rules apply depends on where it is:
//   - everywhere: "DESIGN §N[.M]"; prose naming invariants ("invariant S4", "DESIGN S2"); and
//     the invariant at the end of a parenthetical about the simulation;
//   - in docs/design.md itself: every "§N[.M]" cross-reference;
//   - in the simulation and the chaos run (Go), and in docs/design.md: every invariant-shaped
//     token (not part of a longer word, not a method such as V1()); in the checkers' code (not
//     their tests) also the names they report.
func designRefsIn(path, text string) []designRef {
	lines := newDesignLines(text)
	var out []designRef
	seen := map[string]bool{} // a name cited twice on a line (or found by two rules) counts once
	add := func(off int, section, invariant, how string) {
		if key := fmt.Sprint(lines.at(off), "§", section, "/", invariant); !seen[key] {
			seen[key] = true
			out = append(out, designRef{Path: path, Line: lines.at(off), Section: section, Invariant: invariant, How: how})
		}
	}
	isDoc := path == "docs/"+designDoc
	if isDoc {
		for _, m := range designSelfRef.FindAllStringSubmatchIndex(text, -1) {
			add(m[0], text[m[2]:m[3]], "", "a cross-reference")
		}
	} else {
		for _, m := range designSectionRef.FindAllStringSubmatchIndex(text, -1) {
			add(m[0], text[m[2]:m[3]], "", "a citation")
		}
	}
	if !isDoc {
		for _, m := range designNamedInvariant.FindAllStringSubmatchIndex(text, -1) {
			for _, t := range designToken.FindAllStringIndex(text[m[2]:m[3]], -1) {
				add(m[2]+t[0], "", text[m[2]+t[0]:m[2]+t[1]], "prose")
			}
		}
		for _, m := range designSimCite.FindAllStringSubmatchIndex(text, -1) {
			add(m[2], "", text[m[2]:m[3]], "a simulation note")
		}
	}
	inChecker := strings.HasSuffix(path, ".go") && slices.ContainsFunc(designTokenInvariantDirs,
		func(dir string) bool { return strings.HasPrefix(path, dir) })
	if !inChecker && !isDoc {
		return out
	}
	// (Tests may quote a call in a message: only the checkers' own code reports.)
	for _, m := range designReported.FindAllStringSubmatchIndex(text, -1) {
		if !inChecker || strings.HasSuffix(path, "_test.go") {
			break
		}
		for g := 2; g < len(m); g += 2 {
			if m[g] >= 0 {
				add(m[g], "", text[m[g]:m[g+1]], "a checker's report")
			}
		}
	}
	for _, t := range designToken.FindAllStringIndex(text, -1) {
		if t[0] > 0 && (designWordByte(text[t[0]-1]) || text[t[0]-1] == '.') {
			continue
		}
		if t[1] < len(text) && (designWordByte(text[t[1]]) || text[t[1]] == '(') {
			continue
		}
		add(t[0], "", text[t[0]:t[1]], "an invariant-shaped name")
	}
	return out
}

// designOutline is what the document offers to cite.
type designOutline struct {
	// Sections maps each heading number to its line.
	Sections map[string]int
	// Invariants maps each defined name to the lines defining it.
	Invariants map[string][]int
	// Problems are faults of the document itself (numbering, duplicates).
	Problems []string
}

// designOutlineOf reads the numbered headings and the defined invariants of doc.
func designOutlineOf(doc string) designOutline {
	lines := newDesignLines(doc)
	o := designOutline{Sections: map[string]int{}, Invariants: map[string][]int{}}
	var top, sub int // the last top-level number and the last subsection number under it
	for _, m := range designHeading.FindAllStringSubmatchIndex(doc, -1) {
		line, num := lines.at(m[0]), doc[m[4]:m[5]]
		if prev, dup := o.Sections[num]; dup {
			o.Problems = append(o.Problems, fmt.Sprintf("docs/%s:%d: section %s is numbered again (first at line %d)", designDoc, line, num, prev))
			continue
		}
		o.Sections[num] = line
		parts := strings.Split(num, ".")
		n, _ := strconv.Atoi(parts[0])
		switch len(parts) {
		case 1:
			if n != top+1 {
				o.Problems = append(o.Problems, fmt.Sprintf("docs/%s:%d: section %d follows section %d", designDoc, line, n, top))
			}
			top, sub = n, 0
		case 2:
			m, _ := strconv.Atoi(parts[1])
			switch {
			case n != top:
				o.Problems = append(o.Problems, fmt.Sprintf("docs/%s:%d: subsection %s is under section %d", designDoc, line, num, top))
			case m != sub+1:
				o.Problems = append(o.Problems, fmt.Sprintf("docs/%s:%d: subsection %s follows %d.%d", designDoc, line, num, top, sub))
			}
			top, sub = n, m
		}
	}
	for _, m := range designDefined.FindAllStringSubmatchIndex(doc, -1) {
		name := strings.TrimSpace(doc[m[2]:m[3]])
		o.Invariants[name] = append(o.Invariants[name], lines.at(m[0]))
	}
	for _, name := range slices.Sorted(maps.Keys(o.Invariants)) {
		if at := o.Invariants[name]; len(at) > 1 && designInvariantShape.MatchString(name) {
			o.Problems = append(o.Problems, fmt.Sprintf("docs/%s: invariant %s is defined %d times (lines %v)", designDoc, name, len(at), at))
		}
	}
	return o
}

// designCheck returns every problem: faults of the document, and each citation in files of a
// section or an invariant the document does not have. refs are all the citations found.
func designCheck(doc string, files []designFile) (problems []string, refs []designRef) {
	o := designOutlineOf(doc)
	problems = append(problems, o.Problems...)
	for _, f := range append([]designFile{{Path: "docs/" + designDoc, Text: doc}}, files...) {
		for _, r := range designRefsIn(f.Path, f.Text) {
			refs = append(refs, r)
			switch {
			case r.Section != "":
				if _, ok := o.Sections[r.Section]; !ok {
					problems = append(problems, fmt.Sprintf("%s, but docs/%s has no section %s (its sections: %s)",
						r, designDoc, r.Section, designSectionList(o.Sections)))
				}
			case len(o.Invariants[r.Invariant]) == 0:
				problems = append(problems, fmt.Sprintf("%s, but docs/%s defines no invariant %s (a line `- **%s** …` in §8)",
					r, designDoc, r.Invariant, r.Invariant))
			}
		}
	}
	return problems, refs
}

// designSectionList names the top-level sections, for failure messages.
func designSectionList(sections map[string]int) string {
	var top []int
	for s := range sections {
		if n, err := strconv.Atoi(s); err == nil {
			top = append(top, n)
		}
	}
	sort.Ints(top)
	parts := make([]string, len(top))
	for i, n := range top {
		parts[i] = "§" + strconv.Itoa(n)
	}
	return strings.Join(parts, " ")
}

// designRepoFiles reads every scanned file of the repository.
func designRepoFiles(t *testing.T) []designFile {
	t.Helper()
	var files []designFile
	err := filepath.WalkDir(designRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != designRoot && designSkipDirs[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !designScanned(d.Name()) {
			return nil
		}
		rel, err := filepath.Rel(designRoot, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == designSelf || rel == "docs/"+designDoc {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files = append(files, designFile{Path: rel, Text: string(b)})
		return nil
	})
	if err != nil {
		t.Fatalf("walking the repository: %v", err)
	}
	return files
}

// TestDesignReferences: every section the repository cites as DESIGN §N exists in
// docs/design.md, every invariant it names is defined there, and the document's numbering and
// definitions are sound.
func TestDesignReferences(t *testing.T) {
	doc, err := os.ReadFile(designDoc)
	if err != nil {
		t.Fatalf("the design document: %v", err)
	}
	files := designRepoFiles(t)
	problems, refs := designCheck(string(doc), files)
	for _, p := range problems {
		t.Error(p)
	}

	// What was checked, so that a rule that silently stopped matching shows.
	sections, invariants := map[string]int{}, map[string]int{}
	citations := 0
	for _, r := range refs {
		switch {
		case r.Section != "" && r.Path != "docs/"+designDoc:
			sections[strings.Split(r.Section, ".")[0]]++
			citations++
		case r.Invariant != "":
			invariants[r.Invariant]++
		}
	}
	if citations == 0 {
		t.Fatal("no DESIGN § citation found in the repository: the walk or the pattern is broken")
	}
	if len(invariants) == 0 {
		t.Fatal("no invariant named in the repository: the walk or the patterns are broken")
	}
	var bySection []string
	for _, s := range slices.Sorted(maps.Keys(sections)) {
		bySection = append(bySection, fmt.Sprintf("§%s×%d", s, sections[s]))
	}
	sort.Slice(bySection, func(i, j int) bool {
		a, _ := strconv.Atoi(strings.TrimPrefix(strings.Split(bySection[i], "×")[0], "§"))
		b, _ := strconv.Atoi(strings.TrimPrefix(strings.Split(bySection[j], "×")[0], "§"))
		return a < b
	})
	t.Logf("%d files scanned; %d DESIGN § citations (%s); invariants named: %s",
		len(files), citations, strings.Join(bySection, " "), strings.Join(slices.Sorted(maps.Keys(invariants)), " "))
}

// TestDesignCheckFails runs the check on a small document and files made up for it, so that
// it is known to fail where it must, and not where it must not.
func TestDesignCheckFails(t *testing.T) {
	sect := "DESIGN " + "§" // (split, so that this file's own text cites nothing)
	doc := strings.Join([]string{
		"# A design",
		"## 1. Wire",
		"### 1.1 Numbers",
		"## 2. Bus",
		"See §1.1 and §2, and §7; S1 holds, T5 does not.",
		"## 8. Invariants",
		"- **S1** Safe.",
		"- **L1** Live.",
		"- **L1** Live again.",
		"- **S1-cordoned** Cordoned.",
	}, "\n")
	files := []designFile{
		{Path: "pkg/a/a.go", Text: "// The wire (" + sect + "1), its numbers (" + sect + "1.1);\n// the bus (" + sect + "2.3) and (" + sect + "11).\n"},
		{Path: "pkg/a/b.go", Text: "// (invariant S1), invariants L1 and Z9; (simulation, seed 7, Q2).\n// an R3 bucket, HTTP2, UC3: no invariants.\n"},
		{Path: "internal/sim/check.go", Text: "s.violate(\"S1\", …)\ns.violate(\"X7\", …)\nfactory.Core().V1().Nodes() // K8s\n// S1-cordoned, and W4 here.\n"},
		{Path: "internal/chaos/check.go", Text: "const InvCrash = \"C\"\n"},
		{Path: "README.md", Text: "UC3 describes it; " + sect + "8.\n"},
	}
	problems, _ := designCheck(doc, files)
	got := strings.Join(problems, "\n")
	for _, want := range []string{
		"docs/design.md:5: a cross-reference cites DESIGN §7, but docs/design.md has no section 7",
		"docs/design.md:6: section 8 follows section 2",
		"docs/design.md:5: an invariant-shaped name names invariant T5",
		"invariant L1 is defined 2 times",
		"pkg/a/a.go:2: a citation cites DESIGN §2.3, but docs/design.md has no section 2.3",
		"pkg/a/a.go:2: a citation cites DESIGN §11, but docs/design.md has no section 11 (its sections: §1 §2 §8)",
		"pkg/a/b.go:1: prose names invariant Z9, but docs/design.md defines no invariant Z9",
		"pkg/a/b.go:1: a simulation note names invariant Q2",
		"internal/sim/check.go:2: a checker's report names invariant X7",
		"internal/sim/check.go:4: an invariant-shaped name names invariant W4",
		"internal/chaos/check.go:1: a checker's report names invariant C, but docs/design.md defines no invariant C",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the check does not report %q; it reports:\n%s", want, got)
		}
	}
	for _, wrong := range []string{"§1,", "§1.1,", "DESIGN §8,", " S1,", "S1-cordoned,", "R3", "HTTP2", "UC3", "V1", "K8", "invariant L1,"} {
		if strings.Contains(got, wrong) {
			t.Errorf("the check reports %q, which the fixture has; it reports:\n%s", wrong, got)
		}
	}
	if len(problems) != 11 {
		t.Errorf("%d problems, want 11:\n%s", len(problems), got)
	}
}

package sim

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var (
	// violateName is the invariant a checker reports: the first argument of s.violate.
	violateName = regexp.MustCompile(`\.violate\(\s*"([^"]*)"`)
	// violateOther is a call of violate whose first argument is no string literal: its name
	// could not be checked.
	violateOther = regexp.MustCompile(`\.violate\(\s*[^"\s]`)
	// definedName is a list item of docs/design.md that opens with a bolded name: "- **S1** …".
	definedName = regexp.MustCompile(`(?m)^\s*[-*]\s+\*\*([^*]+)\*\*`)
	// invariantShape is what an invariant's name looks like (S1, L1, P4, …): such a name may be
	// defined once only, wherever in the document.
	invariantShape = regexp.MustCompile(`^[A-Z]{1,2}[0-9]+[a-z]?$`)
)

// TestEveryInvariantIsInTheDesign: every invariant the simulation can report is defined in
// docs/design.md as a bolded list item, and no invariant is defined twice.
func TestEveryInvariantIsInTheDesign(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "design.md"))
	if err != nil {
		t.Fatalf("the design document: %v", err)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	used := map[string][]string{} // name -> files that report it
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range violateName.FindAllStringSubmatch(string(src), -1) {
			if !slices.Contains(used[m[1]], f) {
				used[m[1]] = append(used[m[1]], f)
			}
		}
		for _, loc := range violateOther.FindAllStringIndex(string(src), -1) {
			line := strings.Count(string(src[:loc[0]]), "\n") + 1
			t.Errorf("%s:%d: violate is called with a name that is no string literal; this test cannot check it", f, line)
		}
	}
	if len(used) == 0 {
		t.Fatal(`no s.violate("…") call found in internal/sim: the test's pattern no longer matches the checkers`)
	}

	defined := map[string]int{}
	for _, m := range definedName.FindAllStringSubmatch(string(doc), -1) {
		defined[strings.TrimSpace(m[1])]++
	}

	var missing []string
	for _, name := range slices.Sorted(maps.Keys(used)) {
		if defined[name] == 0 {
			missing = append(missing, name+" (reported in "+strings.Join(used[name], ", ")+")")
		}
	}
	if len(missing) > 0 {
		t.Errorf("invariants the simulation reports but docs/design.md does not define as a `- **X** …` item:\n  %s",
			strings.Join(missing, "\n  "))
	}
	for _, name := range slices.Sorted(maps.Keys(defined)) {
		if n := defined[name]; n > 1 && (invariantShape.MatchString(name) || used[name] != nil) {
			t.Errorf("docs/design.md defines **%s** %d times", name, n)
		}
	}
	t.Logf("invariants reported by the simulation: %s", strings.Join(slices.Sorted(maps.Keys(used)), " "))
}

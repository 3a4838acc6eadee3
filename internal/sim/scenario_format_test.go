package sim

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// scenarioCited is a comment's citation of a regression: "scenario <file name without .txt>".
var scenarioCited = regexp.MustCompile(`\bscenario\s+([a-z0-9]+(?:-[a-z0-9]+)+)`)

// TestCitedScenariosExist: a comment of the simulator that cites a scenario names a file of
// testdata/regressions, so that a reader can follow it.
func TestCitedScenariosExist(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	cited := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// The comments' text, a line's comment joined to the next one's (a name may follow
		// "scenario" on the next line).
		var text []string
		var lines []int
		for i, l := range strings.Split(string(src), "\n") {
			if _, c, ok := strings.Cut(l, "// "); ok {
				text, lines = append(text, c), append(lines, i+1)
			}
		}
		joined := strings.Join(text, " ")
		for _, m := range scenarioCited.FindAllStringSubmatchIndex(joined, -1) {
			cited++
			name := joined[m[2]:m[3]]
			if _, err := os.Stat(filepath.Join(regressionsDir, name+".txt")); err != nil {
				t.Errorf("%s:%d: cites scenario %q, which %s does not hold", f, lines[lineOf(text, m[0])], name, regressionsDir)
			}
		}
	}
	if cited == 0 {
		t.Fatal("no comment cites a scenario: the pattern no longer matches the citations")
	}
}

// lineOf is the index in text of the line that holds offset off of text joined with " ".
func lineOf(text []string, off int) int {
	for i, l := range text {
		if off <= len(l) {
			return i
		}
		off -= len(l) + 1
	}
	return len(text) - 1
}

// TestScenarioFormat: the parser refuses what it does not know, naming the file and line.
func TestScenarioFormat(t *testing.T) {
	good := "A paragraph.\n\nseed: 1\nconfig: small\n" +
		"cluster: nodes 3, coordinators 1, max-concurrent 1, volume-policy wait, volumes 0, groups 1, active 3m\n\n" +
		"faults:\n  1s reboot-required node-1.edge\n\nstory:\n  node-1.edge COMPLETE … node drained\n"
	for _, c := range []struct{ name, text, want string }{
		{"good", good, ""},
		{"unknown key", strings.Replace(good, "seed: 1", "seed: 1\nsed: 2", 1), "x.txt:4: unknown key \"sed\""},
		{"override", strings.Replace(good, "seed: 1", "seed: 1\nvolumes: 1", 1), "x.txt:6: cluster: the configuration is now"},
		{"bad override", strings.Replace(good, "seed: 1", "seed: 1\nmaintenance: yes", 1), "x.txt:4: maintenance: want true or false"},
		{"unknown fault", strings.Replace(good, "reboot-required", "reboot-needed", 1), "x.txt:8: unknown fault \"reboot-needed\""},
		{"target out of range", strings.Replace(good, "node-1.edge\n", "node-3.edge\n", 1), "x.txt:8: reboot-required: node-3.edge: the cluster has 3"},
		{"no target", strings.Replace(good, " node-1.edge\n", "\n", 1), "x.txt:8: reboot-required: which target?"},
		{"stray indent", strings.Replace(good, "config: small", "config: small\n  volumes: 1", 1), "x.txt:5: an indented line belongs to a block"},
		{"no paragraph", strings.TrimPrefix(good, "A paragraph.\n"), "x.txt:1: a scenario opens with a paragraph"},
		{"empty part", strings.Replace(good, "COMPLETE … node", "COMPLETE …  … node", 1), "x.txt:11: story: parts are separated"},
		{"base", strings.Replace(good, "config: small", "config: tiny", 1), "x.txt:4: config: want one of"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.txt")
			if err := os.WriteFile(path, []byte(c.text), 0o644); err != nil {
				t.Fatal(err)
			}
			sc, err := loadScenario(path)
			if err == nil {
				err = sc.checkGenerated()
			}
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("want no error, got %v", err)
			case c.want != "" && (err == nil || !strings.Contains(strings.ReplaceAll(err.Error(), filepath.Dir(path)+string(filepath.Separator), ""), c.want)):
				t.Fatalf("want an error with %q, got %v", c.want, err)
			}
		})
	}
}

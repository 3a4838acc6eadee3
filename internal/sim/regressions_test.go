package sim

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

var updateScenarios = flag.Bool("update", false,
	"rewrite the generated blocks (cluster:, drawn-faults:) of testdata/regressions/*.txt from what the generators give now")

// regressionsDir holds the regression scenarios, one file each; its README.md has the format.
var regressionsDir = filepath.Join("testdata", "regressions")

// updating reports whether this run rewrites the scenarios' generated blocks (-update, or
// EDGEDRAIN_UPDATE_SCENARIOS=1).
func updating() bool {
	return *updateScenarios || os.Getenv("EDGEDRAIN_UPDATE_SCENARIOS") == "1"
}

// TestRegressions runs every scenario of testdata/regressions: each holds the plan of a
// violation the simulation found before its fix. It must run clean now, and the story must show
// that its scenario happened (its story: lines, in that order). The generated blocks (cluster:,
// drawn-faults:) must still be what the generators give for its seed: -update rewrites them.
func TestRegressions(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(regressionsDir, "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no scenario in %s", regressionsDir)
	}
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			sc, err := loadScenario(path)
			if err != nil {
				t.Fatal(err)
			}
			if updating() {
				if sc, err = sc.update(); err != nil {
					t.Fatal(err)
				}
			}
			if err := sc.checkGenerated(); err != nil {
				t.Fatal(err)
			}
			sc.checkRun(t, RunPlan(sc.seed, sc.cfg, sc.plan))
		})
	}
}

// scenario is one file of testdata/regressions.
type scenario struct {
	path    string
	src     []string // the file's lines
	about   string   // the opening paragraph
	entries []entry

	invariant string
	seed      uint64
	cfg       Config
	// drawn is the plan RandomPlan draws for the seed when the file has drawn-faults:; plan is
	// what runs: drawn, then faults:.
	drawn, plan Plan
	expect      []expectation
	// mayRunOnNotSupported: an operation may run on the coordinator's NOTSUPPORTED (the last node
	// up under a declared whole-cluster shutdown, or the only node of the cluster).
	mayRunOnNotSupported bool
}

// entry is one `key: value` of a scenario, with the indented lines that follow it.
type entry struct {
	key, value string
	line       int // 1-based
	block      []blockLine
	end        int // the index in src after its last line
}

type blockLine struct {
	line int
	text string
}

// expectation is one story: line, the parts a line of the story must hold.
type expectation struct {
	parts []string
	line  int
}

// storyPartSep separates the parts of a story: line.
const storyPartSep = " … "

// The structural keys of a scenario; any other key is a Config field (configFields).
var scenarioKeys = []string{"invariant", "seed", "config", "config-seed", "before", "cluster", "drawn-faults", "faults", "story",
	"may-run-on-notsupported"}

var keyShape = regexp.MustCompile(`^[a-z][a-z0-9.-]*$`)

// loadScenario reads and checks a scenario file; its errors name the file and line.
func loadScenario(path string) (*scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sc := &scenario{path: path, src: strings.Split(strings.TrimRight(string(data), "\n"), "\n")}
	var errs []error
	fail := func(line int, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s:%d: %s", path, line, fmt.Sprintf(format, args...)))
	}

	// The opening paragraph runs to the first blank line.
	i := 0
	var about []string
	for ; i < len(sc.src) && strings.TrimSpace(sc.src[i]) != ""; i++ {
		if strings.HasPrefix(sc.src[i], "#") {
			continue
		}
		about = append(about, strings.TrimSpace(sc.src[i]))
	}
	sc.about = strings.Join(about, " ")
	if sc.about == "" {
		fail(1, "a scenario opens with a paragraph saying what went wrong and what it guards")
	}
	for ; i < len(sc.src); i++ {
		text := strings.TrimRightFunc(sc.src[i], unicode.IsSpace)
		switch {
		case text == "" || strings.HasPrefix(text, "#"):
		case text[0] == ' ' || text[0] == '\t':
			if len(sc.entries) == 0 || !blockKey(sc.entries[len(sc.entries)-1].key) {
				fail(i+1, "an indented line belongs to a block (faults:, drawn-faults:, story:, cluster:)")
				continue
			}
			e := &sc.entries[len(sc.entries)-1]
			e.block, e.end = append(e.block, blockLine{line: i + 1, text: strings.TrimSpace(text)}), i+1
		default:
			key, value, ok := strings.Cut(text, ":")
			if !ok || !keyShape.MatchString(key) {
				fail(i+1, "want `key: value`, got %q", text)
				continue
			}
			sc.entries = append(sc.entries, entry{key: key, value: strings.TrimSpace(value), line: i + 1, end: i + 1})
		}
	}

	seen := map[string]int{}
	var overrides []entry
	for _, e := range sc.entries {
		if first, ok := seen[e.key]; ok && e.key != "before" {
			fail(e.line, "%s: given twice (first at line %d)", e.key, first)
			continue
		}
		seen[e.key] = e.line
		if !slices.Contains(scenarioKeys, e.key) {
			if _, ok := configFields()[e.key]; !ok {
				fail(e.line, "unknown key %q (the keys: %s, and the Config fields: %s)", e.key,
					strings.Join(scenarioKeys, ", "), strings.Join(slices.Sorted(maps.Keys(configFields())), ", "))
				continue
			}
			overrides = append(overrides, e)
		}
	}
	for _, k := range []string{"seed", "config", "story"} {
		if _, ok := seen[k]; !ok {
			fail(len(sc.src), "missing %s:", k)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	get := sc.entry
	if e := get("invariant"); e != nil {
		if sc.invariant = e.value; !invariantShape.MatchString(e.value) {
			fail(e.line, "invariant: want a name such as S1 or L1, got %q", e.value)
		}
	}
	if e := get("may-run-on-notsupported"); e != nil {
		if e.value != "true" && e.value != "false" {
			fail(e.line, "may-run-on-notsupported: want true or false, got %q", e.value)
		}
		sc.mayRunOnNotSupported = e.value == "true"
	}
	e := get("seed")
	if sc.seed, err = strconv.ParseUint(e.value, 10, 64); err != nil {
		fail(e.line, "seed: %v", err)
	}
	configSeed := sc.seed
	if e := get("config-seed"); e != nil {
		if configSeed, err = strconv.ParseUint(e.value, 10, 64); err != nil {
			fail(e.line, "config-seed: %v", err)
		}
		if get("config").value == "small" {
			fail(e.line, "config-seed: the small cluster draws nothing from a seed")
		}
	}
	e = get("config")
	base, ok := configBases[e.value]
	if !ok {
		fail(e.line, "config: want one of %s, got %q", strings.Join(slices.Sorted(maps.Keys(configBases)), ", "), e.value)
		return nil, errors.Join(errs...)
	}
	sc.cfg = base(configSeed)
	for _, e := range sc.entries {
		if e.key != "before" {
			continue
		}
		mod, ok := beforeFeatures[e.value]
		if !ok {
			fail(e.line, "before: want one of %s, got %q", strings.Join(slices.Sorted(maps.Keys(beforeFeatures)), ", "), e.value)
			continue
		}
		sc.cfg = mod(sc.cfg)
	}
	for _, e := range overrides {
		if err := setConfigField(&sc.cfg, e.key, e.value); err != nil {
			fail(e.line, "%s: %v", e.key, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	if e := get("drawn-faults"); e != nil {
		if e.value != "" {
			fail(e.line, "drawn-faults: the schedule goes on the indented lines below")
		}
		sc.drawn = RandomPlan(sc.cfg, rand.New(rand.NewPCG(sc.seed, 0x91a4)))
		sc.plan = append(sc.plan, sc.drawn...)
	}
	if e := get("faults"); e != nil {
		if e.value != "" {
			fail(e.line, "faults: one fault a line, on the indented lines below")
		}
		for _, l := range e.block {
			f, err := parseFault(l.text, sc.cfg)
			if err != nil {
				fail(l.line, "%v", err)
				continue
			}
			sc.plan = append(sc.plan, f)
		}
	}
	if get("faults") == nil && get("drawn-faults") == nil {
		fail(len(sc.src), "missing faults: (or drawn-faults:)")
	}
	e = get("story")
	if e.value != "" {
		fail(e.line, "story: one expected line a line, on the indented lines below")
	}
	for _, l := range e.block {
		parts := strings.Split(l.text, storyPartSep)
		for _, p := range parts {
			if strings.TrimSpace(p) == "" || strings.Contains(p, "…") {
				fail(l.line, "story: parts are separated by %q and are not empty", storyPartSep)
			}
		}
		sc.expect = append(sc.expect, expectation{parts: parts, line: l.line})
	}
	if len(sc.expect) == 0 {
		fail(e.line, "story: a scenario expects at least one line")
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return sc, nil
}

func blockKey(key string) bool {
	return key == "faults" || key == "drawn-faults" || key == "story" || key == "cluster"
}

// checkGenerated checks the blocks a reader is given but the run does not read: cluster:, the
// configuration's settings, and drawn-faults:, the schedule the seed draws.
func (sc *scenario) checkGenerated() error {
	var errs []error
	e := sc.entry("cluster")
	switch want := clusterSummary(sc.cfg, sc.plan); {
	case e == nil:
		errs = append(errs, fmt.Errorf("%s:%d: missing cluster: (-update fills it in: %s)", sc.path, sc.entry("config").line, want))
	case e.text() != want:
		errs = append(errs, fmt.Errorf("%s:%d: cluster: the configuration is now\n\t%s\nnot\n\t%s\n(-update rewrites it)", sc.path, e.line, want, e.text()))
	}
	if e := sc.entry("drawn-faults"); e != nil {
		want := faultLines(sc.drawn, sc.cfg)
		for i := range max(len(want), len(e.block)) {
			switch {
			case i >= len(e.block):
				errs = append(errs, fmt.Errorf("%s:%d: drawn-faults: the seed now draws more: %q (-update rewrites the block)", sc.path, e.end, strings.TrimSpace(want[i])))
			case i >= len(want):
				errs = append(errs, fmt.Errorf("%s:%d: drawn-faults: the seed no longer draws this (-update rewrites the block)", sc.path, e.block[i].line))
			case strings.Join(strings.Fields(e.block[i].text), " ") != strings.Join(strings.Fields(want[i]), " "):
				errs = append(errs, fmt.Errorf("%s:%d: drawn-faults: the seed now draws %q here (-update rewrites the block)", sc.path, e.block[i].line, strings.TrimSpace(want[i])))
			}
			if len(errs) > 3 {
				break
			}
		}
	}
	return errors.Join(errs...)
}

// checkRun checks a scenario's run: no violation, and a line of the story for each of its story:
// lines, in that order, holding its parts in that order.
func (sc *scenario) checkRun(t *testing.T, r Result) {
	t.Helper()
	if r.Violation != nil {
		t.Fatalf("%s: %s\n(the scenario: %s)", sc.path, r.Report(), sc.about)
	}
	next := 0
	for _, line := range r.Story {
		if next < len(sc.expect) && containsInOrder(line, sc.expect[next].parts) {
			next++
		}
	}
	if next < len(sc.expect) {
		x := sc.expect[next]
		t.Fatalf("%s:%d: the scenario did not happen: no line with %s after the earlier ones\n%s\n(the scenario: %s)",
			sc.path, x.line, strings.Join(quoteAll(x.parts), " then "), story(r.Story, 60), sc.about)
	}
	// An operation runs on the coordinator's NOTSUPPORTED only in the scenarios about it.
	if !sc.mayRunOnNotSupported {
		for _, line := range r.Story {
			if strings.Contains(line, "cleared by NOTSUPPORTED") {
				t.Fatalf("%s: an operation ran on NOTSUPPORTED (a scenario about that says may-run-on-notsupported: true): %s", sc.path, line)
			}
		}
	}
}

func quoteAll(parts []string) []string {
	q := make([]string, len(parts))
	for i, p := range parts {
		q[i] = strconv.Quote(p)
	}
	return q
}

// containsInOrder reports whether line holds parts, one after the other.
func containsInOrder(line string, parts []string) bool {
	for _, p := range parts {
		i := strings.Index(line, p)
		if i < 0 {
			return false
		}
		line = line[i+len(p):]
	}
	return true
}

func (sc *scenario) entry(key string) *entry {
	for i := range sc.entries {
		if sc.entries[i].key == key {
			return &sc.entries[i]
		}
	}
	return nil
}

// text is an entry's value and block joined, spaces collapsed.
func (e *entry) text() string {
	words := strings.Fields(e.value)
	for _, l := range e.block {
		words = append(words, strings.Fields(l.text)...)
	}
	return strings.Join(words, " ")
}

// update rewrites the generated blocks of the file (cluster:, drawn-faults:) and reads it again.
func (sc *scenario) update() (*scenario, error) {
	type repl struct {
		from, to int // src[from:to] is replaced
		lines    []string
	}
	var rs []repl
	cluster := wrapLine("cluster: ", clusterSummary(sc.cfg, sc.plan), 100)
	if e := sc.entry("cluster"); e != nil {
		rs = append(rs, repl{from: e.line - 1, to: e.end, lines: cluster})
	} else {
		// After the last entry before the first block of faults or story.
		first := len(sc.src)
		for _, k := range []string{"drawn-faults", "faults", "story"} {
			if e := sc.entry(k); e != nil {
				first = min(first, e.line-1)
			}
		}
		at := first
		for _, e := range sc.entries {
			if e.line-1 < first {
				at = e.end
			}
		}
		if at < len(sc.src) && strings.TrimSpace(sc.src[at]) != "" {
			cluster = append(cluster, "")
		}
		rs = append(rs, repl{from: at, to: at, lines: cluster})
	}
	if e := sc.entry("drawn-faults"); e != nil {
		lines := []string{"drawn-faults:"}
		for _, l := range faultLines(sc.drawn, sc.cfg) {
			lines = append(lines, "  "+l)
		}
		rs = append(rs, repl{from: e.line - 1, to: e.end, lines: lines})
	}
	slices.SortFunc(rs, func(a, b repl) int { return b.from - a.from })
	src := slices.Clone(sc.src)
	for _, r := range rs {
		src = slices.Concat(src[:r.from], r.lines, src[r.to:])
	}
	if err := os.WriteFile(sc.path, []byte(strings.Join(src, "\n")+"\n"), 0o644); err != nil {
		return nil, err
	}
	return loadScenario(sc.path)
}

// wrapLine is head+text wrapped after ", " at width, the lines after the first indented.
func wrapLine(head, text string, width int) []string {
	var lines []string
	cur := head
	for i, part := range strings.Split(text, ", ") {
		if i > 0 {
			if len(cur)+2+len(part) > width {
				lines, cur = append(lines, cur+","), "  "+part
				continue
			}
			cur += ", "
		}
		cur += part
	}
	return append(lines, cur)
}

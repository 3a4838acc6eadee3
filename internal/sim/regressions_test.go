package sim

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
	"github.com/edgedrain/edgedrain/pkg/volumes"
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

// The configurations a scenario starts from (config:), each drawn from its config-seed (the
// seed unless given).
var configBases = map[string]func(seed uint64) Config{
	// drawn: what ConfigFor draws for the seed, as random runs have it.
	"drawn": ConfigFor,
	// drawn-one-slot: ConfigFor as it was before it drew several slots with the wait policy.
	"drawn-one-slot": configOneSlotWithWait,
	// small: 3 nodes, one coordinator, max-concurrent 1, one ReplicaSet, no volume (wait
	// policy), commands that do not fail, 3 min of faults; the rest as drawn-one-slot for seed 1
	// before the gate's change signals.
	"small": func(uint64) Config { return small() },
}

// The features a scenario found before them keeps out of its configuration (before:), so that
// its schedule stays the one it was found with.
var beforeFeatures = map[string]func(Config) Config{
	"change-signals":     noChanges,
	"maintenance-policy": beforePolicy,
	// caught-shutdowns: agents that do not catch the reboots typed on their node.
	"caught-shutdowns": func(c Config) Config { c.TypedReboots, c.CatchShutdown = false, false; return c },
}

// small is the cluster of many regressions: 3 nodes, one coordinator, max-concurrent 1.
func small() Config {
	cfg := noChanges(configOneSlotWithWait(1))
	cfg.Nodes, cfg.Coordinators, cfg.MaxConcurrent, cfg.Volumes, cfg.Groups, cfg.VolumePolicy = 3, 1, 1, 0, 1, volumes.PolicyWait
	cfg.CommandFailure, cfg.Active = 0, 3*time.Minute
	return cfg
}

// noChanges is cfg without the gate's change signals and the features added after them
// (decommissions, forgers, agent and operator faults, clocks, --node-selector): the regressions
// found before them keep the schedules they were found with.
func noChanges(cfg Config) Config {
	cfg.InformerChanges, cfg.Decommission, cfg.Forgers, cfg.AgentFaults, cfg.Operators = 0, false, false, false, false
	cfg.Clocks, cfg.Selector = false, false
	return cfg
}

// beforePolicy is cfg without the maintenance policy (windows, blockers, return gate, stale
// holders, domains) and what came after it: the regressions found before it keep the schedules
// they were found with.
func beforePolicy(cfg Config) Config {
	cfg.Maintenance, cfg.Domains, cfg.StaleHolderTimeout, cfg.Policy.ReturnTimeout = false, 0, 0, 0
	cfg.InformerChanges, cfg.Decommission, cfg.Forgers, cfg.AgentFaults = 0, false, false, false
	cfg.Clocks, cfg.Selector = false, false
	return cfg
}

// configFields maps the keys of a scenario's overrides to Config's fields: a field's name in
// kebab case (NoLeaderElection: no-leader-election), policy.… and agent-policy.… for the fields
// of Policy and AgentPolicy.
func configFields() map[string][]int {
	fields := map[string][]int{}
	ct := reflect.TypeFor[Config]()
	for i := range ct.NumField() {
		f := ct.Field(i)
		if f.Type.Kind() == reflect.Struct {
			for j := range f.Type.NumField() {
				fields[kebab(f.Name)+"."+kebab(f.Type.Field(j).Name)] = []int{i, j}
			}
			continue
		}
		fields[kebab(f.Name)] = []int{i}
	}
	return fields
}

// kebab is a Go name in kebab case: APIUnreachableTimeout is api-unreachable-timeout.
func kebab(name string) string {
	var b strings.Builder
	r := []rune(name)
	for i, c := range r {
		if i > 0 && unicode.IsUpper(c) && (unicode.IsLower(r[i-1]) || i+1 < len(r) && unicode.IsLower(r[i+1])) {
			b.WriteByte('-')
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	volumeType   = reflect.TypeFor[volumes.Policy]()
	preflightTyp = reflect.TypeFor[coordinator.Preflight]()
)

// setConfigField sets the field key names to value.
func setConfigField(cfg *Config, key, value string) error {
	v := reflect.ValueOf(cfg).Elem().FieldByIndex(configFields()[key])
	switch {
	case v.Type() == durationType:
		d, err := time.ParseDuration(value)
		if err != nil {
			return err
		}
		v.SetInt(int64(d))
	case v.Type() == volumeType:
		p, err := volumes.ParsePolicy(value)
		if err != nil {
			return err
		}
		v.Set(reflect.ValueOf(p))
	case v.Type() == preflightTyp:
		p, err := coordinator.ParsePreflight(value)
		if err != nil {
			return err
		}
		v.Set(reflect.ValueOf(p))
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(value)
		if err != nil || (value != "true" && value != "false") {
			return fmt.Errorf("want true or false, got %q", value)
		}
		v.SetBool(b)
	case v.Kind() == reflect.Int:
		n, err := strconv.Atoi(value)
		if err != nil {
			return err
		}
		v.SetInt(int64(n))
	case v.Kind() == reflect.Float64:
		x, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return err
		}
		v.SetFloat(x)
	default:
		return fmt.Errorf("a field of type %s cannot be set from a scenario", v.Type())
	}
	return nil
}

// configValue is the field key of cfg as a scenario writes it.
func configValue(cfg Config, key string) string {
	v := reflect.ValueOf(cfg).FieldByIndex(configFields()[key])
	switch {
	case v.Type() == durationType:
		return fmtDur(time.Duration(v.Int()))
	case v.Kind() == reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	}
	return fmt.Sprint(v.Interface())
}

// clusterSummary is what cluster: says: the settings of cfg a run with plan depends on, as
// `key value` (a true flag as its key alone), the keys those of the overrides.
func clusterSummary(cfg Config, plan Plan) string {
	show := func(key string, when bool) string {
		if !when {
			return ""
		}
		if v := configValue(cfg, key); v != "true" {
			return key + " " + v
		}
		return key
	}
	decommission := slices.ContainsFunc(plan, func(f Fault) bool { return f.Kind == Decommission })
	parts := []string{
		show("nodes", true), show("coordinators", true), show("no-leader-election", cfg.NoLeaderElection),
		show("max-concurrent", true), show("volume-policy", true), show("volumes", true), show("replicas", cfg.Replicas != 2),
		show("groups", true), show("pods-per-group", cfg.PodsPerGroup != 2), show("domains", cfg.Domains != 0),
		show("active", true), show("quiet", cfg.Quiet != 20*time.Minute), show("command-failure", cfg.CommandFailure != 0),
		show("api-unreachable-timeout", cfg.APIUnreachableTimeout != time.Minute),
		show("stale-holder-timeout", cfg.StaleHolderTimeout != 0), show("policy.return-timeout", cfg.Policy.ReturnTimeout != 0),
		show("policy.decommission-linger", decommission), show("maintenance", cfg.Maintenance),
		show("preflight", cfg.Preflight != coordinator.PreflightOff), show("informer-changes", cfg.InformerChanges != 0),
		show("informer-relist", cfg.InformerRelist != 0), show("catch-shutdown", cfg.CatchShutdown),
		show("inhibit-delay", cfg.CatchShutdown), show("shutdown-job-failures", cfg.ShutdownJobFailures != 0),
		show("unchecked-deliveries", cfg.UncheckedDeliveries), show("no-outcome-file", cfg.NoOutcomeFile),
	}
	return strings.Join(slices.DeleteFunc(parts, func(s string) bool { return s == "" }), ", ")
}

// fmtDur writes a duration as time.ParseDuration reads it, without Go's trailing zero units
// (3m, not 3m0s).
func fmtDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// fmtAt writes a fault's time in seconds, as the story stamps its lines, to the nanosecond.
func fmtAt(d time.Duration) string {
	s := fmt.Sprintf("%d.%09d", d/time.Second, d%time.Second)
	return strings.TrimSuffix(strings.TrimRight(s, "0"), ".") + "s"
}

// targetKind is what a fault's Target names.
type targetKind int

const (
	noTarget targetKind = iota
	nodeTarget
	coordTarget
	volumeTarget
	groupTarget  // a ReplicaSet and its PodDisruptionBudget
	streamTarget // the status or the requests stream
)

// faultTargets lists every kind of fault a scenario may schedule and what its target is (taken
// modulo their number by apply). A new Kind goes here too.
var faultTargets = map[Kind]targetKind{
	Reboot: nodeTarget, Update: nodeTarget, KernelDay: noTarget, CoordCrash: coordTarget, CoordFreeze: coordTarget,
	AgentCrash: nodeTarget, AgentCut: nodeTarget, BusOutage: noTarget, BusLossy: noTarget, WatchLag: nodeTarget,
	APIOutage: noTarget, OperatorCordon: nodeTarget, OperatorUncord: nodeTarget, Withdraw: nodeTarget, Override: nodeTarget,
	KubeletDown: nodeTarget, NodeReregister: nodeTarget, ReplicaFails: volumeTarget, PowerCycle: nodeTarget,
	AgentDuplicated: nodeTarget, ForgedStatus: nodeTarget, ClusterShutdown: noTarget, Decommission: nodeTarget,
	PDBBlocks: groupTarget, StateLost: nodeTarget, ForgedOverLive: nodeTarget,
	AgentPause: nodeTarget, AgentPauseAtRead: nodeTarget, DiskFull: nodeTarget, DiskReadOnly: nodeTarget,
	OverrideUnsupported: nodeTarget, AgentCutNotReady: nodeTarget, AgentPausedNotReady: nodeTarget,
	WritesLate: noTarget, WriteRepliesLost: noTarget,
	ClockStep: nodeTarget, NoRTC: nodeTarget, NoRTCFarPast: nodeTarget, CoordClockSkew: coordTarget, ControlPlaneSkew: noTarget,
	CoordPauseMidWrite: coordTarget, CoordAPICut: coordTarget, CoordBusCut: coordTarget,
	PodPinned: nodeTarget, BindRace: nodeTarget, DaemonSetPods: nodeTarget,
	StatusForger: nodeTarget, InformersBehind: noTarget,
	OperatorPutsRequest: nodeTarget, OperatorReplaysRequest: nodeTarget,
	OperatorRecordon: nodeTarget, RecordonAtGate: nodeTarget, RecordonLostReply: nodeTarget, RecordonNoCoordinator: nodeTarget,
	KeepCordoned: nodeTarget, NodeDeleted: nodeTarget, NodeDeletedForGood: nodeTarget,
	FollowerLags: streamTarget, StreamElection: noTarget, QuorumLoss: noTarget,
	SelectorLeave: nodeTarget, SelectorLeaveForGood: nodeTarget, SelectorJoinLate: nodeTarget, Unmanaged: nodeTarget,
	TypedReboot: nodeTarget,
}

var streams = []string{bucketStatus, bucketRequests} // (FollowerLags' Target%2)

// targetName is the name of what f strikes in cfg's cluster ("" for none).
func targetName(f Fault, cfg Config) string {
	mod := func(n int) int {
		if n <= 0 {
			return f.Target
		}
		return f.Target % n
	}
	switch faultTargets[f.Kind] {
	case nodeTarget:
		return fmt.Sprintf("node-%d.edge", mod(cfg.Nodes))
	case coordTarget:
		return fmt.Sprintf("coordinator-%d", mod(cfg.Coordinators))
	case volumeTarget:
		return fmt.Sprintf("vol%d", mod(cfg.Volumes))
	case groupTarget:
		return fmt.Sprintf("app%d", mod(cfg.Groups))
	case streamTarget:
		return streams[f.Target%2]
	}
	return ""
}

var targetShapes = map[targetKind]*regexp.Regexp{
	nodeTarget: regexp.MustCompile(`^node-([0-9]+)\.edge$`), coordTarget: regexp.MustCompile(`^coordinator-([0-9]+)$`),
	volumeTarget: regexp.MustCompile(`^vol([0-9]+)$`), groupTarget: regexp.MustCompile(`^app([0-9]+)$`),
}

// fmtFault is one line of a faults: block: time, kind, target, for.
func fmtFault(f Fault, cfg Config) string {
	s := fmtAt(f.At) + " " + string(f.Kind)
	if t := targetName(f, cfg); t != "" {
		s += " " + t
	}
	if f.For != 0 {
		s += " for " + fmtDur(f.For)
	}
	return s
}

// faultLines is p as the lines of a faults: block, by time (ties in plan order), aligned.
func faultLines(p Plan, cfg Config) []string {
	p = slices.Clone(p)
	slices.SortStableFunc(p, func(a, b Fault) int { return cmp.Compare(a.At, b.At) })
	rows := make([][]string, len(p))
	widths := make([]int, 3)
	for i, f := range p {
		rows[i] = []string{fmtAt(f.At), string(f.Kind), targetName(f, cfg), ""}
		if f.For != 0 {
			rows[i][3] = "for " + fmtDur(f.For)
		}
		for c := range widths {
			widths[c] = max(widths[c], len(rows[i][c]))
		}
	}
	lines := make([]string, len(p))
	for i, r := range rows {
		lines[i] = strings.TrimRight(fmt.Sprintf("%*s  %-*s  %-*s  %s", widths[0], r[0], widths[1], r[1], widths[2], r[2], r[3]), " ")
	}
	return lines
}

// parseFault reads one line of a faults: block.
func parseFault(text string, cfg Config) (Fault, error) {
	words := strings.Fields(text)
	if len(words) < 2 {
		return Fault{}, fmt.Errorf("want `<time> <kind> [<target>] [for <duration>]`, got %q", text)
	}
	var f Fault
	if !strings.HasSuffix(words[0], "s") {
		return f, fmt.Errorf("a fault's time is in seconds (12.5s), got %q", words[0])
	}
	at, err := time.ParseDuration(words[0])
	if err != nil || at < 0 {
		return f, fmt.Errorf("a fault's time is in seconds (12.5s), got %q", words[0])
	}
	f.At, f.Kind = at, Kind(words[1])
	tk, ok := faultTargets[f.Kind]
	if !ok {
		return f, fmt.Errorf("unknown fault %q (a new kind goes in faultTargets, regressions_test.go)", words[1])
	}
	rest := words[2:]
	if tk != noTarget {
		if len(rest) == 0 || rest[0] == "for" {
			return f, fmt.Errorf("%s: which target? (%s)", f.Kind, targetName(Fault{Kind: f.Kind}, cfg))
		}
		if f.Target, err = parseTarget(tk, rest[0], cfg); err != nil {
			return f, fmt.Errorf("%s: %v", f.Kind, err)
		}
		rest = rest[1:]
	}
	switch {
	case len(rest) == 0:
	case len(rest) == 2 && rest[0] == "for":
		if f.For, err = time.ParseDuration(rest[1]); err != nil {
			return f, err
		}
	default:
		return f, fmt.Errorf("want `<time> <kind> [<target>] [for <duration>]`, got %q after the kind", strings.Join(rest, " "))
	}
	return f, nil
}

func parseTarget(tk targetKind, s string, cfg Config) (int, error) {
	if tk == streamTarget {
		if i := slices.Index(streams, s); i >= 0 {
			return i, nil
		}
		return 0, fmt.Errorf("want a stream (%s), got %q", strings.Join(streams, " or "), s)
	}
	m := targetShapes[tk].FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("want a target such as %s, got %q", targetName(Fault{Kind: kindOf(tk)}, cfg), s)
	}
	i, _ := strconv.Atoi(m[1])
	n := map[targetKind]int{nodeTarget: cfg.Nodes, coordTarget: cfg.Coordinators, volumeTarget: cfg.Volumes, groupTarget: cfg.Groups}[tk]
	if i >= n && !(tk == volumeTarget && n == 0) {
		return 0, fmt.Errorf("%s: the cluster has %d", s, n)
	}
	return i, nil
}

func kindOf(tk targetKind) Kind {
	for k, t := range faultTargets {
		if t == tk {
			return k
		}
	}
	return ""
}

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

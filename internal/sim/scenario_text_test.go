package sim

import (
	"cmp"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
	"github.com/edgedrain/edgedrain/pkg/volumes"
)

// How a scenario file writes a configuration and its faults, and reads them back.

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

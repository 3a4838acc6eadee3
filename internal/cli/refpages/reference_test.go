package refpages

import (
	"bytes"
	"fmt"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/edgedrain/edgedrain/internal/cli"
	"github.com/edgedrain/edgedrain/pkg/busauth"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
	"github.com/edgedrain/edgedrain/pkg/policy"
	"github.com/edgedrain/edgedrain/pkg/volumes"
)

// TestReferencePages keeps docs/reference/metrics.md and wire.md what the code says: the metrics
// gathered from registries filled as the programs fill theirs, and the numbers and names of the
// wire's enums. It fails when they differ; with EDGEDRAIN_UPDATE_REFERENCE=1 (make docs) it
// writes them.
func TestReferencePages(t *testing.T) {
	metrics, err := metricsPage()
	require.NoError(t, err)
	wire, err := wirePage(RepoRoot(t))
	require.NoError(t, err)
	pages := map[string][]byte{"metrics.md": metrics, "wire.md": wire}
	CheckPortable(t, pages)
	Check(t, pages, func(string) bool { return false })
}

// coordinatorMetrics registers what the coordinator's run (cmd/coordinator/run.go) registers:
// the engine's metrics, the volume gate's, the bus authenticator's, the maintenance policy
// source's and the bus probe's, beside the Go runtime's and the process's (cli.NewRegistry).
// A component that registers metrics there must be added here.
func coordinatorMetrics() ([]Metric, error) {
	r := NewRecorder(cli.NewRegistry())
	coordinator.NewMetrics(r)
	volumes.NewMetrics(r)
	if _, err := busauth.New(busauth.Config{Registerer: r}); err != nil {
		return nil, err
	}
	if _, err := policy.NewSource(policy.SourceConfig{Client: fake.NewClientset(), Namespace: policy.DefaultNamespace,
		Name: policy.DefaultName, Registerer: r}); err != nil {
		return nil, err
	}
	cli.NewBusProbe(nil, nil, r, cli.CoordinatorBusMetric, logrus.New())
	return r.Metrics()
}

// agentMetrics registers what the agent's run (cmd/agent/run.go) registers.
func agentMetrics() ([]Metric, error) {
	r := NewRecorder(cli.NewRegistry())
	agent.NewMetrics(r)
	cli.NewBusProbe(nil, nil, r, cli.AgentBusMetric, logrus.New())
	return r.Metrics()
}

func metricsPage() ([]byte, error) {
	coord, err := coordinatorMetrics()
	if err != nil {
		return nil, err
	}
	ag, err := agentMetrics()
	if err != nil {
		return nil, err
	}
	return MetricsPage("the programs' Prometheus registries (internal/cli/refpages)",
		"Every metric the programs serve at /metrics on their --listen address, gathered from registries filled as the\n"+
			"programs fill theirs. Besides these, both serve the Go runtime's (go_*) and the process's (process_*) metrics\n"+
			"of the Prometheus client library. A labelled metric has a series per value of its labels once one is seen;\n"+
			"some are there from the start at 0.",
		[]Section{
			{Title: "coordinator", Intro: "Served on `--listen` (default `:9090`); see [coordinator](coordinator.md).", Metrics: coord},
			{Title: "agent", Intro: "Served on `--listen` (default `:9091`); see [agent](agent.md).", Metrics: ag},
		}), nil
}

// wirePage lists what travels on the bus: the buckets and keys, the two messages' fields, and
// the numbers and names of their enums, from the package's exported values and its source's
// doc comments.
func wirePage(root string) ([]byte, error) {
	src, err := ReadSource(filepath.Join(root, "pkg/nodedrain"))
	if err != nil {
		return nil, err
	}
	agentSrc, err := ReadSource(filepath.Join(root, "pkg/nodedrain/agent"))
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(Header("pkg/nodedrain's enums and doc comments (internal/cli/refpages)"))
	b.WriteString("# The wire\n\nWhat the agents and the coordinator exchange on the NATS bus: two JetStream key-value buckets,\n" +
		"keyed by node name, holding JSON messages whose enums travel as numbers. The numbers never\n" +
		"change; a decoder refuses a number it does not know (and accepts a name for a number in the\n" +
		"agent's override file).\n")

	b.WriteString("\n## Buckets and keys\n\n| Name | Value | Meaning |\n|---|---|---|\n")
	for _, c := range []struct {
		name, value string
	}{{"RequestsBucket", nodedrain.RequestsBucket}, {"StatusBucket", nodedrain.StatusBucket}, {"TermKey", nodedrain.TermKey}} {
		d, ok := src.Named(c.name)
		if !ok {
			return nil, fmt.Errorf("no constant %s in pkg/nodedrain", c.name)
		}
		fmt.Fprintf(&b, "| `nodedrain.%s` | `%s` | %s |\n", c.name, c.value, cell(meaning(d)))
	}

	b.WriteString("\n## Drain statuses (`Status`)\n\nThe coordinator's answer, in `NodeDrainStatus.Status`.\n\n" +
		"| Number | Name | Meaning |\n|---|---|---|\n")
	if err := enumRows(&b, src, "DrainStatus", func(v int) (string, bool) {
		s := nodedrain.DrainStatus(v)
		return s.String(), s.IsValid()
	}); err != nil {
		return nil, err
	}
	b.WriteString("\n## Requesters (`RequestedBy`)\n\nWho asked for the drain, in `NodeDrainRequest.RequestedBy` and `NodeDrainStatus.RequestedBy`; " +
		"0 is unset and never valid in a request.\n\n| Number | Name | Meaning |\n|---|---|---|\n")
	if err := enumRows(&b, src, "Requester", func(v int) (string, bool) {
		r := nodedrain.Requester(v)
		return r.String(), r.IsValid()
	}); err != nil {
		return nil, err
	}

	b.WriteString("\n## The agent's operations\n\nEach operation the agent holds back asks for its drain as a requester.\n\n" +
		"| Operation | Requester | Meaning |\n|---|---|---|\n")
	for _, op := range agent.Operations {
		c, ok := agentSrc.Const("Operation", strconv.Quote(string(op)))
		if !ok {
			return nil, fmt.Errorf("no constant for operation %q in pkg/nodedrain/agent", op)
		}
		fmt.Fprintf(&b, "| `%s` | %d %s | %s |\n", op, int(op.Requester()), op.Requester(), cell(meaning(c)))
	}

	b.WriteString("\n## Blocker kinds (`Blockers[].Kind`)\n\nWhat holds a drain back, in `NodeDrainStatus.Blockers`; a decoder accepts other kinds " +
		"(a newer coordinator may add some).\n\n| Kind | Meaning |\n|---|---|\n")
	for _, c := range src.OfType("BlockerKind") {
		v, err := strconv.Unquote(c.Value)
		if err != nil {
			return nil, fmt.Errorf("blocker kind %s: %w", c.Name, err)
		}
		fmt.Fprintf(&b, "| `%s` | %s |\n", v, cell(meaning(c)))
	}

	for _, m := range []struct {
		v     any
		where string
	}{
		{nodedrain.NodeDrainRequest{}, "the agent's request, in the bucket `" + nodedrain.RequestsBucket + "` under its node's name"},
		{nodedrain.NodeDrainStatus{}, "the coordinator's answer, in the bucket `" + nodedrain.StatusBucket + "` under the node's name"},
		{nodedrain.Blocker{}, "one object that holds a drain back, in `NodeDrainStatus.Blockers`"},
	} {
		if err := fieldRows(&b, src, reflect.TypeOf(m.v), m.where); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}

// enumRows writes a row for every valid value of the enum typ (valid and named by value).
func enumRows(b *bytes.Buffer, src *Source, typ string, value func(int) (string, bool)) error {
	rows := 0
	for v := 0; v < 256; v++ {
		name, ok := value(v)
		if !ok {
			continue
		}
		c, found := src.Const(typ, strconv.Itoa(v))
		if !found {
			return fmt.Errorf("%s %d (%s) has no constant in pkg/nodedrain", typ, v, name)
		}
		fmt.Fprintf(b, "| %d | `%s` | %s |\n", v, name, cell(meaning(c)))
		rows++
	}
	if rows == 0 {
		return fmt.Errorf("%s has no valid value", typ)
	}
	return nil
}

// fieldRows writes the JSON fields of the message type t.
func fieldRows(b *bytes.Buffer, src *Source, t reflect.Type, where string) error {
	docs := src.Fields[t.Name()]
	fmt.Fprintf(b, "\n## `%s`\n\n%s.\n\n| Field | Type | Omitted when empty | Meaning |\n|---|---|---|---|\n", t.Name(), capitalize(where))
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		omitted := "no"
		if strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero") {
			omitted = "yes"
		}
		typ := f.Type.String()
		switch f.Type {
		case reflect.TypeOf(nodedrain.DrainStatus(0)), reflect.TypeOf(nodedrain.Requester(0)):
			typ += " (a number)"
		case reflect.TypeOf(nodedrain.NodeDrainStatus{}.StartedAt):
			typ += " (RFC 3339)"
		}
		doc := meaning(Const{Name: f.Name, Doc: docs[f.Name]})
		if doc == "" {
			doc = "—"
		}
		fmt.Fprintf(b, "| `%s` | `%s` | %s | %s |\n", name, typ, omitted, cell(doc))
	}
	return nil
}

// meaning is a constant's doc comment without its leading name ("StatusComplete means ...").
func meaning(c Const) string {
	d := strings.TrimPrefix(c.Doc, c.Name+" ")
	for _, p := range []string{"means ", "is "} {
		d = strings.TrimPrefix(d, p)
	}
	return capitalize(d)
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	yamlv3 "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// DefaultWindowKey is the key of Config.Windows used by requesters without their own window.
const DefaultWindowKey = "default"

// DefaultPrometheusTimeout bounds each Prometheus request when the policy sets no timeout.
const DefaultPrometheusTimeout = 10 * time.Second

// MaxPrometheusTimeout is the longest Prometheus timeout a policy may set.
const MaxPrometheusTimeout = 5 * time.Minute

// Config is a parsed, valid maintenance policy. The zero Config (also what a Source holds
// while the ConfigMap is absent) restricts nothing. Treat it as read-only: a Source hands the
// same Config to every caller.
type Config struct {
	// Windows maps DefaultWindowKey and requester names (nodedrain.Requester.String():
	// "NONE", "DEVICEOP", "UPDATE") to their maintenance window; use WindowFor to look one up.
	Windows map[string]Window
	// Blockers are what holds a drain back besides the volume gate.
	Blockers Blockers
	// Order ranks the nodes waiting to be drained.
	Order Order
}

// WindowFor returns r's window, else the default window, else AlwaysOpen; a nil Config
// restricts nothing.
func (c *Config) WindowFor(r nodedrain.Requester) Window {
	if c == nil {
		return AlwaysOpen
	}
	if w, ok := c.Windows[r.String()]; ok && r.IsValid() {
		return w
	}
	if w, ok := c.Windows[DefaultWindowKey]; ok {
		return w
	}
	return AlwaysOpen
}

// Blockers says what, besides volumes, holds a drain of a node back.
type Blockers struct {
	// PodSelector selects the pods whose presence on the node blocks its drain; nil: none.
	PodSelector labels.Selector
	// PodSelectorText is PodSelector as the policy wrote it ("" when nil).
	PodSelectorText string
	// Prometheus blocks drains on firing alerts and non-empty query results; nil: not asked.
	Prometheus *Prometheus
}

// Prometheus is a Prometheus server asked before each drain. It fails closed: a server that
// does not answer blocks.
type Prometheus struct {
	// URL is the server's base URL (http or https, with a host), e.g.
	// http://prometheus.monitoring:9090.
	URL string
	// Timeout bounds each request (DefaultPrometheusTimeout unless the policy sets one; at
	// most MaxPrometheusTimeout).
	Timeout time.Duration
	// Alerts selects the firing alerts that block; nil: alerts are not checked.
	Alerts *AlertFilter
	// Queries are PromQL expressions that must each return an empty result, else they block.
	Queries []string
}

// AlertFilter selects alerts by name (label alertname).
type AlertFilter struct {
	// Include must match the name (unanchored, like regexp.MatchString); nil: every name.
	Include *regexp.Regexp
	// Exclude must not match the name; nil: none excluded.
	Exclude *regexp.Regexp
}

// Matches reports whether a firing alert named alertname blocks. A nil filter (alerts not
// checked) matches nothing.
func (f *AlertFilter) Matches(alertname string) bool {
	if f == nil {
		return false
	}
	if f.Include != nil && !f.Include.MatchString(alertname) {
		return false
	}
	return f.Exclude == nil || !f.Exclude.MatchString(alertname)
}

// MaxSize is the largest policy Parse accepts, in bytes.
const MaxSize = 256 << 10

// Parse decodes and validates a policy written in YAML (see the package comment). It is strict:
// unknown fields, values of the wrong type, duplicate keys, anchors and aliases, more than one
// document, text that is not UTF-8 and documents over MaxSize are errors. Every error matches
// ErrInvalid and names the field path of each problem (windows.UPDATE.start: ...). Empty input
// is the empty policy.
func Parse(data []byte) (*Config, error) {
	if len(data) > MaxSize {
		return nil, fmt.Errorf("%w: %d bytes, more than the limit of %d", ErrInvalid, len(data), MaxSize)
	}
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("%w: not UTF-8 text (invalid byte at offset %d)", ErrInvalid, invalidUTF8At(data))
	}
	if err := checkYAML(data); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, oneLine(err))
	}
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, oneLine(err))
	}
	var doc any
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	var p problems
	c := decodeConfig(&p, doc)
	if err := p.err(); err != nil {
		return nil, err
	}
	return c, nil
}

// oneLine returns err's message with its line breaks and indentation collapsed (the YAML
// parsers' lists of errors span lines).
func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

func invalidUTF8At(data []byte) int {
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return -1
}

// checkYAML parses data without expanding anything and refuses what the policy has no use
// for and what could make decoding expensive: anchors and aliases (a "billion laughs" expands
// a few kilobytes into gigabytes), merge keys, more than one document, and a document that
// is not a mapping.
func checkYAML(data []byte) error {
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	var doc yamlv3.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil
	} else if err != nil {
		return err
	}
	var more yamlv3.Node
	if err := dec.Decode(&more); err == nil {
		return fmt.Errorf("line %d: a second YAML document (the policy is one document)", more.Line)
	} else if !errors.Is(err, io.EOF) {
		return err
	}
	if len(doc.Content) == 1 {
		root := doc.Content[0]
		switch {
		case root.Kind == yamlv3.MappingNode, root.Kind == yamlv3.ScalarNode && root.Tag == "!!null":
		default:
			return fmt.Errorf("line %d: the policy must be a mapping (windows, blockers, order), not %s", root.Line, nodeKind(root))
		}
	}
	return checkNodes(&doc)
}

func checkNodes(n *yamlv3.Node) error {
	switch {
	case n.Kind == yamlv3.AliasNode:
		return fmt.Errorf("line %d: alias *%s: anchors and aliases are not allowed", n.Line, n.Value)
	case n.Anchor != "":
		return fmt.Errorf("line %d: anchor &%s: anchors and aliases are not allowed", n.Line, n.Anchor)
	case n.Kind == yamlv3.ScalarNode && n.Tag == "!!merge":
		return fmt.Errorf("line %d: merge keys (<<) are not allowed", n.Line)
	}
	for _, c := range n.Content {
		if err := checkNodes(c); err != nil {
			return err
		}
	}
	return nil
}

func nodeKind(n *yamlv3.Node) string {
	switch n.Kind {
	case yamlv3.SequenceNode:
		return "a list"
	case yamlv3.ScalarNode:
		return fmt.Sprintf("the scalar %q", abbreviate(n.Value, 40))
	}
	return "an alias"
}

// requesterNames lists the requesters' names for messages.
var requesterNames = strings.Join([]string{nodedrain.RequesterNone.String(), nodedrain.RequesterDeviceOp.String(), nodedrain.RequesterUpdate.String()}, ", ")

// parseRequesterKey returns the requester named by key (its name, any case; not its number).
func parseRequesterKey(key string) (nodedrain.Requester, bool) {
	for _, r := range []nodedrain.Requester{nodedrain.RequesterNone, nodedrain.RequesterDeviceOp, nodedrain.RequesterUpdate} {
		if strings.EqualFold(key, r.String()) {
			return r, true
		}
	}
	return 0, false
}

// decodeConfig turns the decoded document into a Config, adding every problem to p.
func decodeConfig(p *problems, doc any) *Config {
	root := p.object("", doc, "windows", "blockers", "order")
	c := &Config{}
	c.Windows = decodeWindows(p, "windows", root["windows"])
	c.Blockers = decodeBlockers(p, "blockers", root["blockers"])
	c.Order = decodeOrder(p, "order", root["order"])
	return c
}

func decodeWindows(p *problems, path string, v any) map[string]Window {
	m := p.mapping(path, v)
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]Window, len(m))
	for _, key := range sortedKeys(m) {
		kp := fieldPath(path, key)
		name := ""
		if strings.EqualFold(key, DefaultWindowKey) {
			name = DefaultWindowKey
		} else if r, ok := parseRequesterKey(key); ok {
			name = r.String()
		} else {
			p.add(kp, "unknown requester (want %s or one of %s)", DefaultWindowKey, requesterNames)
			continue
		}
		if _, dup := out[name]; dup {
			p.add(kp, "window for %s given twice", name)
			continue
		}
		out[name] = decodeWindow(p, kp, m[key])
	}
	return out
}

func decodeWindow(p *problems, path string, v any) Window {
	m := p.object(path, v, "days", "start", "end", "timeZone")
	var w Window
	for i, d := range p.list(fieldPath(path, "days"), m["days"]) {
		ip := itemPath(fieldPath(path, "days"), i)
		if d == nil {
			p.add(ip, "empty entry (want a weekday)")
		} else if s, ok := p.str(ip, d); ok {
			day, err := ParseWeekday(s)
			if err != nil {
				p.add(ip, "%v", err)
				continue
			}
			w.Days = append(w.Days, day)
		}
	}
	w.Days = normalizeDays(w.Days)
	clock := func(key string) (Clock, bool) {
		s, ok := p.str(fieldPath(path, key), m[key])
		if !ok {
			return 0, false
		}
		c, err := ParseClock(s)
		if err != nil {
			p.add(fieldPath(path, key), "%v", err)
			return 0, false
		}
		return c, true
	}
	start, hasStart := clock("start")
	end, hasEnd := clock("end")
	switch {
	case hasStart && hasEnd:
		w.Start, w.End = start, end
	case hasStart && m["end"] == nil:
		p.add(fieldPath(path, "end"), "required with start (the same time as start means a whole day)")
	case hasEnd && m["start"] == nil:
		p.add(fieldPath(path, "start"), "required with end")
	}
	if s, ok := p.str(fieldPath(path, "timeZone"), m["timeZone"]); ok && s != "" {
		w.Location = loadLocation(p, fieldPath(path, "timeZone"), s)
	}
	w.Always = len(w.Days) == 0 && w.Start == w.End
	return w
}

// loadLocation loads an IANA zone; "Local" and "" are refused (they depend on the machine).
func loadLocation(p *problems, path, name string) *time.Location {
	if name == "Local" || strings.TrimSpace(name) != name {
		p.add(path, "%q is not an IANA time zone name (like Europe/Berlin or UTC)", name)
		return nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		p.add(path, "unknown time zone %q (want an IANA name like Europe/Berlin or UTC): %v", name, err)
		return nil
	}
	return loc
}

func decodeBlockers(p *problems, path string, v any) Blockers {
	m := p.object(path, v, "podSelector", "prometheus")
	var b Blockers
	if s, ok := p.str(fieldPath(path, "podSelector"), m["podSelector"]); ok && strings.TrimSpace(s) != "" {
		sel, err := labels.Parse(s)
		if err != nil {
			p.add(fieldPath(path, "podSelector"), "invalid label selector %q: %v", s, err)
		} else {
			b.PodSelector, b.PodSelectorText = sel, s
		}
	}
	if m["prometheus"] != nil {
		b.Prometheus = decodePrometheus(p, fieldPath(path, "prometheus"), m["prometheus"])
	}
	return b
}

func decodePrometheus(p *problems, path string, v any) *Prometheus {
	m := p.object(path, v, "url", "timeout", "alerts", "queries")
	pr := &Prometheus{Timeout: DefaultPrometheusTimeout}
	up := fieldPath(path, "url")
	if s, ok := p.str(up, m["url"]); ok {
		if err := checkURL(s); err != "" {
			p.add(up, "%s", err)
		}
		pr.URL = s
	} else if m["url"] == nil {
		p.add(up, "required")
	}
	tp := fieldPath(path, "timeout")
	if s, ok := p.str(tp, m["timeout"]); ok {
		d, err := time.ParseDuration(s)
		switch {
		case err != nil:
			p.add(tp, "%q is not a duration (like 10s or 1m30s)", s)
		case d <= 0 || d > MaxPrometheusTimeout:
			p.add(tp, "%s is outside (0, %s]", s, MaxPrometheusTimeout)
		default:
			pr.Timeout = d
		}
	}
	if m["alerts"] != nil {
		pr.Alerts = decodeAlerts(p, fieldPath(path, "alerts"), m["alerts"])
	}
	qp := fieldPath(path, "queries")
	for i, q := range p.list(qp, m["queries"]) {
		if q == nil {
			p.add(itemPath(qp, i), "empty query")
		} else if s, ok := p.str(itemPath(qp, i), q); ok {
			if strings.TrimSpace(s) == "" {
				p.add(itemPath(qp, i), "empty query")
				continue
			}
			pr.Queries = append(pr.Queries, s)
		}
	}
	return pr
}

// checkURL returns what is wrong with a Prometheus base URL, or ""; the message never shows a
// password the URL carries.
func checkURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "not a URL"
	}
	shown := strconv.Quote(u.Redacted())
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return shown + " must start with http:// or https://"
	case u.Host == "" || u.Hostname() == "":
		return shown + " has no host"
	case u.RawQuery != "" || u.Fragment != "":
		return shown + " must not carry a query or fragment (give the server's base URL)"
	}
	return ""
}

func decodeAlerts(p *problems, path string, v any) *AlertFilter {
	m := p.object(path, v, "include", "exclude")
	f := &AlertFilter{}
	compile := func(key string) *regexp.Regexp {
		s, ok := p.str(fieldPath(path, key), m[key])
		if !ok || s == "" {
			return nil
		}
		re, err := regexp.Compile(s)
		if err != nil {
			p.add(fieldPath(path, key), "invalid regular expression: %v", err)
			return nil
		}
		return re
	}
	f.Include, f.Exclude = compile("include"), compile("exclude")
	return f
}

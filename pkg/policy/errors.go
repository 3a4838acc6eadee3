package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Sentinel errors of the package; test for them with errors.Is.
var (
	// ErrInvalid is matched by every error Parse returns: the policy does not decode or breaks a
	// rule. The message names the field path of each problem.
	ErrInvalid = errors.New("invalid maintenance policy")
	// ErrMissingKey is matched by a Source's State.Err when the ConfigMap exists but holds no
	// policy under its key in data (it may be in binaryData, which is not read).
	ErrMissingKey = errors.New("policy key missing")
	// ErrInvalidSourceConfig is returned by NewSource for a SourceConfig it cannot run with.
	ErrInvalidSourceConfig = errors.New("invalid policy source configuration")
	// ErrAlreadyRunning is returned by a second call of Source.Run.
	ErrAlreadyRunning = errors.New("policy source already running")
)

// problems collects what is wrong with a policy, each under its field path, so that Parse
// reports every problem at once.
type problems struct{ msgs []string }

// add records a problem at path ("" is the whole document).
func (p *problems) add(path, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	p.msgs = append(p.msgs, msg)
}

// err returns nil or one error matching ErrInvalid that lists every problem.
func (p *problems) err() error {
	if len(p.msgs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(p.msgs, "; "))
}

// mapping returns v as a mapping (null: empty); anything else is a problem.
func (p *problems) mapping(path string, v any) map[string]any {
	switch t := v.(type) {
	case nil:
		return nil
	case map[string]any:
		return t
	}
	p.add(path, "want a mapping, got %s", describe(v))
	return nil
}

// object returns v as a mapping with the given fields; any other key is a problem.
func (p *problems) object(path string, v any, fields ...string) map[string]any {
	m := p.mapping(path, v)
	for _, k := range sortedKeys(m) {
		if !slices.Contains(fields, k) {
			p.add(fieldPath(path, k), "unknown field (want %s)", strings.Join(fields, ", "))
		}
	}
	return m
}

// list returns v as a list (null: empty); anything else is a problem.
func (p *problems) list(path string, v any) []any {
	switch t := v.(type) {
	case nil:
		return nil
	case []any:
		return t
	}
	p.add(path, "want a list, got %s", describe(v))
	return nil
}

// str returns v as a string; ok is false for null (absent: no problem) and for anything
// else (a problem).
func (p *problems) str(path string, v any) (s string, ok bool) {
	switch t := v.(type) {
	case nil:
		return "", false
	case string:
		return t, true
	}
	p.add(path, "want a string, got %s", describe(v))
	return "", false
}

// integer returns v as an int within ±MaxPriority; ok is false for null (absent: no problem)
// and for anything else (a problem).
func (p *problems) integer(path string, v any) (n int, ok bool) {
	switch t := v.(type) {
	case nil:
		return 0, false
	case json.Number:
		i, err := strconv.ParseInt(t.String(), 10, 64)
		if err != nil || i < -MaxPriority || i > MaxPriority {
			p.add(path, "want a whole number from %d to %d, got %s", -MaxPriority, MaxPriority, t)
			return 0, false
		}
		return int(i), true
	}
	p.add(path, "want a whole number, got %s", describe(v))
	return 0, false
}

// describe names the kind of a decoded value for messages.
func describe(v any) string {
	switch t := v.(type) {
	case nil:
		return "nothing (null)"
	case string:
		return fmt.Sprintf("the string %q", abbreviate(t, 40))
	case json.Number:
		return "the number " + t.String()
	case bool:
		return fmt.Sprintf("the boolean %t", t)
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprintf("%T", v)
}

func abbreviate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func fieldPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func itemPath(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

package nodedrain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// enumSpec describes a small integer enum whose valid values are
// min..len(names)-1, shared by DrainStatus and Requester.
type enumSpec struct {
	typeName string   // Go type name, for String of unknown values
	err      error    // sentinel wrapped by every rejection
	min      int      // lowest valid value
	names    []string // names[v] is the name of v; entries below min are unused
	choices  string   // "1 NONE, 2 DEVICEOP, 3 UPDATE"
}

func newEnumSpec(typeName string, err error, min int, names []string) *enumSpec {
	parts := make([]string, 0, len(names)-min)
	for v := min; v < len(names); v++ {
		parts = append(parts, strconv.Itoa(v)+" "+names[v])
	}
	return &enumSpec{
		typeName: typeName,
		err:      err,
		min:      min,
		names:    names,
		choices:  strings.Join(parts, ", "),
	}
}

func (e *enumSpec) valid(v int) bool { return v >= e.min && v < len(e.names) }

func (e *enumSpec) String(v int) string {
	if e.valid(v) {
		return e.names[v]
	}
	return e.typeName + "(" + strconv.Itoa(v) + ")"
}

// unknown returns the error for a rejected value; shown is how to print it.
func (e *enumSpec) unknown(shown string) error {
	return fmt.Errorf("%w %s (want %s)", e.err, shown, e.choices)
}

// checkValid returns nil for a valid value, else the unknown-value error.
func (e *enumSpec) checkValid(v int) error {
	if e.valid(v) {
		return nil
	}
	return e.unknown(strconv.Itoa(v))
}

// parse accepts a name (ASCII case-insensitive) or a decimal number.
func (e *enumSpec) parse(s string) (int, error) {
	t := strings.TrimSpace(s)
	for v := e.min; v < len(e.names); v++ {
		if asciiEqualFold(t, e.names[v]) {
			return v, nil
		}
	}
	if n, err := strconv.Atoi(t); err == nil && e.valid(n) {
		return n, nil
	}
	return 0, e.unknown(strconv.Quote(truncate(s)))
}

// unmarshalJSON accepts a JSON integer or a JSON string holding a name or a
// number. ok is false for JSON null, which by convention leaves the value as is.
func (e *enumSpec) unmarshalJSON(data []byte) (v int, ok bool, err error) {
	data = bytes.TrimSpace(data)
	switch kind := jsonKind(data); kind {
	case "null":
		return 0, false, nil
	case "number":
		n, perr := strconv.Atoi(string(data))
		if perr != nil || !e.valid(n) {
			return 0, false, e.unknown(truncate(string(data)))
		}
		return n, true, nil
	case "string":
		var s string
		if uerr := json.Unmarshal(data, &s); uerr != nil {
			return 0, false, fmt.Errorf("%w: %v", e.err, uerr)
		}
		n, perr := e.parse(s)
		return n, perr == nil, perr
	default:
		return 0, false, fmt.Errorf("%w: got JSON %s %s, want a number or a name (%s)",
			e.err, kind, truncate(string(data)), e.choices)
	}
}

// marshalText returns the name of a valid value.
func (e *enumSpec) marshalText(v int) ([]byte, error) {
	if err := e.checkValid(v); err != nil {
		return nil, err
	}
	return []byte(e.names[v]), nil
}

// jsonKind names the JSON type of a value from its first byte.
func jsonKind(data []byte) string {
	if len(data) == 0 {
		return "nothing"
	}
	switch c := data[0]; {
	case c == 'n':
		return "null"
	case c == 't' || c == 'f':
		return "boolean"
	case c == '"':
		return "string"
	case c == '[':
		return "array"
	case c == '{':
		return "object"
	case c == '-' || (c >= '0' && c <= '9'):
		return "number"
	default:
		return "value"
	}
}

// maxShown bounds how much of a rejected value an error message repeats.
const maxShown = 40

// truncate shortens s for an error message.
func truncate(s string) string {
	if len(s) <= maxShown {
		return s
	}
	cut := maxShown
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// asciiEqualFold reports whether a and b are equal under ASCII case folding
// only, so that non-ASCII look-alikes never match a name.
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'a' <= x && x <= 'z' {
			x -= 'a' - 'A'
		}
		if 'a' <= y && y <= 'z' {
			y -= 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

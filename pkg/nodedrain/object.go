package nodedrain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// member is one name/value pair of a JSON object, in input order.
type member struct {
	name  string
	value json.RawMessage
}

// parseObject checks that data is exactly one JSON object, optionally
// surrounded by whitespace, and returns its members. Its errors are details
// of an ErrMalformed payload error.
func parseObject(data []byte) ([]member, error) {
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("not valid UTF-8 at %s", where(data, invalidUTF8At(data)))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		switch {
		case errors.Is(err, io.EOF):
			return nil, errors.New("empty payload")
		case errors.Is(err, io.ErrUnexpectedEOF):
			return nil, fmt.Errorf("unexpected end of JSON input at %s (truncated?)", where(data, len(data)))
		}
		var se *json.SyntaxError
		if errors.As(err, &se) && se.Offset > 0 && se.Offset <= int64(len(data)) {
			return nil, fmt.Errorf("JSON syntax error at %s: %w", where(data, int(se.Offset-1)), err)
		}
		return nil, fmt.Errorf("JSON syntax error: %w", err)
	}
	raw = trimJSONSpace(raw)
	if kind := jsonKind(raw); kind != "object" {
		return nil, fmt.Errorf("top-level value is %s %s, want a JSON object", article(kind), kind)
	}
	end := int(dec.InputOffset())
	if rest := trimJSONSpace(data[end:]); len(rest) > 0 {
		at := len(data) - len(bytes.TrimLeft(data[end:], jsonSpace))
		return nil, fmt.Errorf("trailing data after the JSON object at %s", where(data, at))
	}
	return objectMembers(raw)
}

// objectMembers lists the members of obj, which must be a valid JSON object.
func objectMembers(obj []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	var ms []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("object key is %v, want a string", tok)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		ms = append(ms, member{name: name, value: trimJSONSpace(v)})
	}
	return ms, nil
}

const jsonSpace = " \t\r\n"

func trimJSONSpace(b []byte) []byte { return bytes.Trim(b, jsonSpace) }

// where describes byte offset off of data for people editing a file.
func where(data []byte, off int) string {
	off = min(max(off, 0), len(data))
	line := 1 + bytes.Count(data[:off], []byte("\n"))
	col := off - (bytes.LastIndexByte(data[:off], '\n') + 1) + 1
	return fmt.Sprintf("line %d, column %d (byte offset %d)", line, col, off)
}

func invalidUTF8At(data []byte) int {
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return len(data)
}

func article(kind string) string {
	if strings.IndexByte("aeiou", kind[0]) >= 0 {
		return "an"
	}
	return "a"
}

// describe names a rejected JSON value for an error message.
func describe(raw []byte) string {
	switch kind := jsonKind(raw); kind {
	case "number", "boolean", "string":
		return kind + " " + truncate(string(raw))
	default:
		return kind
	}
}

// decoder collects what is wrong with a payload while its fields are decoded.
type decoder struct {
	malformed problems // structure: duplicate or miscased names
	invalid   problems // values: wrong JSON type, unknown enum value
}

// field is a known member name and how to decode its (non-null) value.
type field struct {
	name   string
	decode func(d *decoder, path string, raw []byte)
}

// object decodes members into fields and reports which fields held a
// non-null value. Unknown names are ignored for forward compatibility.
func (d *decoder) object(members []member, prefix string, fields []field) []bool {
	seen := make([]bool, len(fields))
	present := make([]bool, len(fields))
members:
	for _, m := range members {
		for i, f := range fields {
			if m.name != f.name {
				continue
			}
			path := joinPath(prefix, f.name)
			if seen[i] {
				d.malformed.addf(path, "duplicate field")
				continue members
			}
			seen[i] = true
			if jsonKind(m.value) != "null" {
				present[i] = true
				f.decode(d, path, m.value)
			}
			continue members
		}
		for _, f := range fields {
			if strings.EqualFold(m.name, f.name) {
				d.malformed.addf(joinPath(prefix, strconv.Quote(m.name)),
					"field names are case-sensitive; did you mean %q?", f.name)
			}
		}
	}
	return present
}

func joinPath(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// wrongType records that the value at path is not of the wanted JSON type.
func (d *decoder) wrongType(path, want string, raw []byte) {
	d.invalid.addf(path, "want %s, got %s", want, describe(raw))
}

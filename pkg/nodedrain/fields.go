package nodedrain

import (
	"encoding/json"
	"strconv"
	"time"
)

// decodeFunc decodes one non-null JSON value found at path.
type decodeFunc = func(d *decoder, path string, raw []byte)

func stringField(dst *string) decodeFunc {
	return func(d *decoder, path string, raw []byte) {
		if jsonKind(raw) != "string" || json.Unmarshal(raw, dst) != nil {
			d.wrongType(path, "a JSON string", raw)
		}
	}
}

func intField(dst *int) decodeFunc {
	return func(d *decoder, path string, raw []byte) {
		n, err := strconv.Atoi(string(raw))
		if jsonKind(raw) != "number" || err != nil {
			d.wrongType(path, "an integer", raw)
			return
		}
		*dst = n
	}
}

func boolField(dst *bool) decodeFunc {
	return func(d *decoder, path string, raw []byte) {
		if jsonKind(raw) != "boolean" || json.Unmarshal(raw, dst) != nil {
			d.wrongType(path, "true or false", raw)
		}
	}
}

func timeField(dst *time.Time) decodeFunc {
	return func(d *decoder, path string, raw []byte) {
		var t time.Time
		if jsonKind(raw) != "string" || t.UnmarshalJSON(raw) != nil {
			d.wrongType(path, `an RFC 3339 time such as "2006-01-02T15:04:05Z"`, raw)
			return
		}
		*dst = t
	}
}

func statusField(dst *DrainStatus) decodeFunc {
	return func(d *decoder, path string, raw []byte) {
		if err := dst.UnmarshalJSON(raw); err != nil {
			d.invalid.add(path, err)
		}
	}
}

func requesterField(dst *Requester) decodeFunc {
	return func(d *decoder, path string, raw []byte) {
		if err := dst.UnmarshalJSON(raw); err != nil {
			d.invalid.add(path, err)
		}
	}
}

func blockersField(dst *[]Blocker) decodeFunc {
	return func(d *decoder, path string, raw []byte) {
		var elems []json.RawMessage
		if jsonKind(raw) != "array" || json.Unmarshal(raw, &elems) != nil {
			d.wrongType(path, "a JSON array of blockers", raw)
			return
		}
		if len(elems) > MaxBlockers {
			d.invalid.addf(path, "%d blockers, more than the limit of %d", len(elems), MaxBlockers)
			return
		}
		if len(elems) == 0 {
			*dst = nil // the same value as an absent field, as Encode writes it
			return
		}
		bs := make([]Blocker, len(elems))
		for i, elem := range elems {
			elemPath := path + "[" + strconv.Itoa(i) + "]"
			elem = trimJSONSpace(elem)
			if jsonKind(elem) != "object" {
				d.wrongType(elemPath, "a JSON object", elem)
				continue
			}
			members, err := objectMembers(elem)
			if err != nil {
				d.malformed.add(elemPath, err)
				continue
			}
			b := &bs[i]
			d.object(members, elemPath, []field{
				{"Kind", stringField((*string)(&b.Kind))},
				{"Namespace", stringField(&b.Namespace)},
				{"Name", stringField(&b.Name)},
				{"Reason", stringField(&b.Reason)},
				{"Progress", intField(&b.Progress)},
			})
		}
		*dst = bs
	}
}

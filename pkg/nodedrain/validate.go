package nodedrain

import (
	"strconv"
	"strings"
	"time"
	"unicode"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ValidNodeName returns nil when name is a valid Kubernetes node name (a
// DNS-1123 subdomain of at most 253 characters), else an error saying why.
func ValidNodeName(name string) error {
	if name == "" {
		return errRequired
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return &nodeNameError{name: name, msgs: msgs}
	}
	return nil
}

type nodeNameError struct {
	name string
	msgs []string
}

func (e *nodeNameError) Error() string {
	return "invalid node name " + strconv.Quote(truncate(e.name)) + ": " + strings.Join(e.msgs, "; ")
}

type constError string

func (e constError) Error() string { return string(e) }

const errRequired = constError("required")

func checkNode(p *problems, node string) {
	if err := ValidNodeName(node); err != nil {
		p.add("Node", err)
	}
}

func checkRequestID(p *problems, id string) {
	if len(id) > MaxRequestIDLen {
		p.addf("RequestID", "%d bytes, longer than the limit of %d", len(id), MaxRequestIDLen)
		return
	}
	for i, r := range id {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) {
			p.addf("RequestID", "non-printable character %q at byte %d", r, i)
			return
		}
	}
}

func blockerPath(i int) string { return "Blockers[" + strconv.Itoa(i) + "]" }

// checkTime rejects times that JSON (RFC 3339) cannot represent.
func checkTime(p *problems, path string, t time.Time) {
	if y := t.Year(); y < 0 || y > 9999 {
		p.addf(path, "year %d is outside 0..9999", y)
	}
	if _, off := t.Zone(); off <= -24*60*60 || off >= 24*60*60 {
		p.addf(path, "zone offset %ds is not within a day", off)
	}
}

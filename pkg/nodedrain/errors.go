package nodedrain

import (
	"errors"
	"fmt"
	"strings"
)

// ErrMalformed is matched by errors for payloads that are not a single JSON
// object: empty, truncated, syntax errors, trailing data, a top-level value
// that is not an object, duplicate fields or a known field name in the wrong case.
var ErrMalformed = errors.New("malformed payload")

// ErrPayloadTooLarge is matched by errors for payloads longer than MaxPayloadSize.
var ErrPayloadTooLarge = errors.New("payload too large")

// ErrInvalid is matched by errors for well-formed JSON objects whose fields break
// the contract: a field of the wrong JSON type, an unknown enum value, or a
// failed Validate.
var ErrInvalid = errors.New("invalid value")

// ErrUnknownStatus is matched by errors for a value that is not a DrainStatus.
var ErrUnknownStatus = errors.New("unknown status")

// ErrUnknownRequester is matched by errors for a value that is not a Requester.
var ErrUnknownRequester = errors.New("unknown requester")

// payloadError reports why a message was rejected. It matches its class
// (ErrMalformed, ErrInvalid or ErrPayloadTooLarge) and every detail error
// under errors.Is.
type payloadError struct {
	subject string  // "drain request", "drain status", "status override"
	class   error   // one of the three class sentinels
	details []error // what is wrong, each usually a *fieldError
}

// maxDetails bounds how many problems one error message lists.
const maxDetails = 10

func newPayloadError(subject string, class error, details ...error) *payloadError {
	return &payloadError{subject: subject, class: class, details: details}
}

func (e *payloadError) Error() string {
	var b strings.Builder
	switch e.class {
	case ErrMalformed:
		b.WriteString("malformed " + e.subject)
	case ErrPayloadTooLarge:
		b.WriteString(e.subject + " too large")
	default:
		b.WriteString("invalid " + e.subject)
	}
	for i, d := range e.details {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		if i == maxDetails {
			fmt.Fprintf(&b, "and %d more", len(e.details)-i)
			break
		}
		b.WriteString(d.Error())
	}
	return b.String()
}

func (e *payloadError) Unwrap() []error {
	return append([]error{e.class}, e.details...)
}

// fieldError prefixes an error with the path of the field it concerns.
type fieldError struct {
	path string // "Status", "Blockers[2].Progress"
	err  error
}

func (e *fieldError) Error() string { return e.path + ": " + e.err.Error() }

func (e *fieldError) Unwrap() error { return e.err }

// problems collects validation failures, one per field.
type problems []error

func (p *problems) add(path string, err error) {
	*p = append(*p, &fieldError{path: path, err: err})
}

func (p *problems) addf(path, format string, args ...any) {
	p.add(path, fmt.Errorf(format, args...))
}

// err returns nil when nothing was added, else an ErrInvalid payload error.
func (p problems) err(subject string) error {
	if len(p) == 0 {
		return nil
	}
	return newPayloadError(subject, ErrInvalid, p...)
}

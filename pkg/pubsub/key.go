package pubsub

import (
	"fmt"
	"strings"
)

// MaxKeyLength bounds key length; it is far above the 253 characters of a
// Kubernetes node name and well inside NATS subject limits.
const MaxKeyLength = 1024

// ValidKey reports whether key can name a value in a bucket. Keys are NATS
// subject tokens joined by dots: the characters a-z, A-Z, 0-9 and "-/_=."
// only, no leading or trailing dot and no empty token ("a..b"). Every valid
// Kubernetes node name is a valid key as it is. The error wraps ErrInvalidKey
// and names the key.
func ValidKey(key string) error {
	reason := keyProblem(key)
	if reason == "" {
		return nil
	}
	return fmt.Errorf("%w %q: %s", ErrInvalidKey, key, reason)
}

func keyProblem(key string) string {
	switch {
	case key == "":
		return "empty"
	case len(key) > MaxKeyLength:
		return fmt.Sprintf("longer than %d characters", MaxKeyLength)
	case strings.HasPrefix(key, "."):
		return "leading dot"
	case strings.HasSuffix(key, "."):
		return "trailing dot"
	case strings.Contains(key, ".."):
		return "empty token between dots"
	}
	for i, r := range key {
		if r >= 0x80 || !keyByte(byte(r)) {
			return fmt.Sprintf("character %q at offset %d not allowed (allowed: a-z A-Z 0-9 - / _ = .)", r, i)
		}
	}
	return ""
}

func keyByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	case c == '-', c == '/', c == '_', c == '=', c == '.':
		return true
	}
	return false
}

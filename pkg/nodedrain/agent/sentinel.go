package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"strings"
	"time"
	"unicode"

	"github.com/edgedrain/edgedrain/internal/safefile"
)

// DefaultRebootSentinel is the file whose presence asks for a reboot (written by Debian and
// Ubuntu package upgrades).
const DefaultRebootSentinel = "/var/run/reboot-required"

// maxSentinelLine bounds how much of a sentinel file's first line goes into the request context.
const maxSentinelLine = 200

// sentinelHit is a sentinel file found present.
type sentinelHit struct {
	op      Operation
	path    string
	modTime int64 // Unix nanoseconds
	context string
}

// checkSentinel looks for op's sentinel file at path. found is false when it does not exist; the
// request context is the operation followed by the file's first line, if it has a printable one
// ("update v1.2.3").
func checkSentinel(op Operation, path string) (hit sentinelHit, found bool, err error) {
	f, fi, err := safefile.Open(path, true)
	if errors.Is(err, fs.ErrNotExist) {
		return sentinelHit{}, false, nil
	}
	if err != nil {
		return sentinelHit{}, false, fmt.Errorf("%s sentinel: %w", op, err)
	}
	defer f.Close()
	hit = sentinelHit{op: op, path: path, modTime: fi.ModTime().UnixNano(), context: string(op)}
	if fi.IsDir() {
		return hit, true, nil // a directory asks as well as a file would
	}
	// The first line only, bounded: a file of one endless line must not be read to its end.
	line, _ := bufio.NewReaderSize(io.LimitReader(f, 512), 512).ReadString('\n')
	if line = cleanLine(line); line != "" {
		hit.context += " " + line
	}
	return hit, true, nil
}

// cleanLine keeps the printable part of a line, trimmed and bounded.
func cleanLine(s string) string {
	s = strings.ToValidUTF8(s, "")
	s = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return -1
	}, s)
	return truncate(strings.TrimSpace(s), maxSentinelLine)
}

// jittered returns interval plus a random extra of up to jitter, so that a fleet of agents
// started together does not check (and ask) at the same moment.
func jittered(interval, jitter time.Duration) time.Duration {
	if jitter <= 0 {
		return interval
	}
	return interval + rand.N(jitter+1)
}

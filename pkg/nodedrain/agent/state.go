package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/edgedrain/edgedrain/internal/safefile"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// StateFileName is the name of the state file inside the state directory.
const StateFileName = "agent-state.json"

// stateVersion is the version of the state file's format.
const stateVersion = 1

// maxStateSize bounds the state file read back; a real one is well under a kilobyte.
const maxStateSize = 64 << 10

// stateFile is the on-disk form of State.
type stateFile struct {
	Version int   `json:"version"`
	State   State `json:"state"`
}

// StateStore keeps the agent's State in a file, written atomically (a temporary file renamed
// over it) so that a crash leaves either the old or the new state, never a mix.
type StateStore struct {
	dir  string
	path string
}

// NewStateStore returns a store for the state file in dir.
func NewStateStore(dir string) *StateStore {
	return &StateStore{dir: dir, path: filepath.Join(dir, StateFileName)}
}

// Path returns the state file's path.
func (s *StateStore) Path() string { return s.path }

// Load reads the state. A missing file is the idle state; a file that cannot be decoded or
// breaks the contract is an error matching ErrCorruptState that names the file and the reason.
func (s *StateStore) Load() (State, error) {
	f, _, err := safefile.Open(s.path, false)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return State{Phase: PhaseIdle}, nil
	case err != nil: // also no regular file there (a FIFO, a directory): not moved aside
		return State{}, fmt.Errorf("read state file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxStateSize+1))
	if err != nil {
		return State{}, fmt.Errorf("read state file %s: %w", s.path, err)
	}
	st, err := decodeState(data)
	if err != nil {
		return State{}, fmt.Errorf("%w %s: %w", ErrCorruptState, s.path, err)
	}
	return st, nil
}

func decodeState(data []byte) (State, error) {
	if len(data) > maxStateSize {
		return State{}, fmt.Errorf("larger than %d bytes", maxStateSize)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return State{}, errors.New("empty file")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var sf stateFile
	if err := dec.Decode(&sf); err != nil {
		return State{}, fmt.Errorf("not a state file: %w", err)
	}
	if dec.More() {
		return State{}, errors.New("trailing data after the state")
	}
	if sf.Version != stateVersion {
		return State{}, fmt.Errorf("version %d, want %d", sf.Version, stateVersion)
	}
	if err := sf.State.validate(); err != nil {
		return State{}, err
	}
	return sf.State, nil
}

// validate checks what a decoded state needs to be acted on safely.
func (st State) validate() error {
	if !st.Phase.valid() {
		return fmt.Errorf("unknown phase %q", st.Phase)
	}
	for op := range st.Handled {
		if !op.Valid() {
			return fmt.Errorf("handled: %w %q", ErrUnknownOperation, op)
		}
	}
	if st.Phase == PhaseIdle {
		if st.Operation != "" || st.RequestID != "" || st.OnBus {
			return errors.New("idle state with an operation or a request")
		}
		return nil
	}
	if !st.Operation.Valid() {
		return fmt.Errorf("phase %s: %w %q", st.Phase, ErrUnknownOperation, st.Operation)
	}
	req := nodedrain.NodeDrainRequest{Node: "node", RequestID: st.RequestID, RequestedAt: st.RequestedAt,
		RequestedBy: st.Operation.Requester(), Context: st.Context}
	if err := req.Validate(); err != nil {
		return err
	}
	if err := checkContext(st.Operation, st.Context); err != nil {
		return err // a reboot published as a decommission would have its Node deleted
	}
	if st.DrainFailures < 0 || st.CommandFailures < 0 {
		return errors.New("negative failure count")
	}
	return nil
}

// Save writes st atomically: a temporary file in the same directory, synced, then renamed over
// the state file, and the directory synced. The directory is created if needed.
func (s *StateStore) Save(st State) error {
	data, err := json.MarshalIndent(stateFile{Version: stateVersion, State: st}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	data = append(data, '\n')
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	tmp, err := os.CreateTemp(s.dir, ".agent-state-*.tmp")
	if err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	done := false
	defer func() {
		if !done {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write state %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("sync state %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close state %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), s.path); err != nil {
		return fmt.Errorf("replace state file: %w", err)
	}
	done = true
	if d, err := os.Open(s.dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// Quarantine moves a corrupt state file aside (to <file>.corrupt-<time>) so that the agent can
// start afresh while an operator can still look at it, and returns the new path.
func (s *StateStore) Quarantine(now time.Time) (string, error) {
	dst := s.path + ".corrupt-" + now.UTC().Format("20060102T150405Z")
	if err := os.Rename(s.path, dst); err != nil {
		return "", fmt.Errorf("move corrupt state file aside: %w", err)
	}
	return dst, nil
}

// encodeForCompare returns a canonical encoding of st, to tell whether it changed.
func encodeForCompare(st State) []byte {
	data, _ := json.Marshal(st)
	return data
}

// ReadBootID reads the node's boot ID (a UUID from /proc/sys/kernel/random/boot_id, or any
// file standing in for it in tests). An empty or unreadable file is an error.
func ReadBootID(path string) (string, error) {
	data, err := safefile.ReadAtMost(path, 256)
	if err != nil {
		return "", fmt.Errorf("boot ID: %w", err)
	}
	id := strings.TrimSpace(string(data))
	if id == "" || strings.ContainsAny(id, "\n\r\x00") {
		return "", fmt.Errorf("boot ID %s: want one line holding an ID, got %q", path, truncate(id, 40))
	}
	return id, nil
}

// truncate shortens s to at most n bytes for a message, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "..."
}

// ReadBootTime returns when the node booted, from the kernel's /proc/stat ("btime SECONDS").
func ReadBootTime(path string) (time.Time, error) {
	data, err := safefile.ReadAtMost(path, 1<<20)
	if err != nil {
		return time.Time{}, fmt.Errorf("boot time: %w", err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "btime "); ok {
			secs, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			if err != nil || secs <= 0 {
				return time.Time{}, fmt.Errorf("boot time %s: bad btime line %q", path, truncate(line, 40))
			}
			return time.Unix(secs, 0), nil
		}
	}
	return time.Time{}, fmt.Errorf("boot time %s: no btime line", path)
}

// Stale reports whether req was made before the node's boot, whose time is t (zero: no start-up
// clean-up is pending, and no request is stale) and whose boot ID is boot: no agent of this boot
// made it. A request naming the boot it was made in is judged by that alone: the boot time moves
// with the clock, and a clock stepped back since the request by more than its age made it look
// made since the boot, for good (found by the simulation with clocks). One naming no
// boot (an older agent's, or edgedrainctl's) is judged by its time.
func Stale(req nodedrain.NodeDrainRequest, t time.Time, boot string) bool {
	switch {
	case t.IsZero():
		return false
	case req.BootID != "" && boot != "":
		return req.BootID != boot
	}
	return req.RequestedAt.Before(t)
}

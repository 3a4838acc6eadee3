package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"

	"github.com/edgedrain/edgedrain/internal/safefile"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// DefaultOverrideFile is the forced-status file of DESIGN §4.
const DefaultOverrideFile = "/persist/kube-status/force-NodeDrainStatus-global.json"

// fileSig identifies one version of a file cheaply, from its metadata, so that a poll reads
// the file only after it changed.
type fileSig struct {
	size  int64
	mtime time.Time
	ctime syscall.Timespec
	ino   uint64
}

func sigOf(fi fs.FileInfo) fileSig {
	s := fileSig{size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ctime, s.ino = st.Ctim, st.Ino
	}
	return s
}

// OverrideChange is what a poll of the override file found.
type OverrideChange struct {
	// Changed says the file changed in a way that matters: Override is the new forced status
	// (nil: the file is gone).
	Changed  bool
	Override *nodedrain.StatusOverride
	// Err is set when the file changed but cannot be used (unreadable, not a valid override):
	// the forced status stays as it was.
	Err error
}

// overrideFile polls the forced-status file. It reads the file only when its metadata changed,
// and reports a bad version of the file once.
type overrideFile struct {
	path    string
	present bool    // a version of the file was seen
	sig     fileSig // ... with this signature
	statErr string  // the last stat error reported, to report each once
	active  *nodedrain.StatusOverride
}

func newOverrideFile(path string) *overrideFile { return &overrideFile{path: path} }

// poll checks the file. A file that appeared or changed is read and decoded with
// nodedrain.DecodeOverride; a removed file clears the override.
func (o *overrideFile) poll() OverrideChange {
	fi, err := os.Stat(o.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		o.statErr = ""
		if !o.present {
			return OverrideChange{}
		}
		o.present = false
		if o.active == nil {
			return OverrideChange{} // only an invalid version was there
		}
		o.active = nil
		return OverrideChange{Changed: true}
	case err != nil:
		if err.Error() == o.statErr {
			return OverrideChange{}
		}
		o.statErr = err.Error()
		return OverrideChange{Err: fmt.Errorf("override file: %w", err)}
	case fi.IsDir():
		if o.statErr == "dir" {
			return OverrideChange{}
		}
		o.statErr = "dir"
		return OverrideChange{Err: fmt.Errorf("override file %s is a directory", o.path)}
	}
	o.statErr = ""
	sig := sigOf(fi)
	if o.present && sig == o.sig {
		return OverrideChange{}
	}
	o.present, o.sig = true, sig
	ov, err := readOverride(o.path)
	if err != nil {
		return OverrideChange{Err: err}
	}
	if o.active != nil && *o.active == ov {
		return OverrideChange{} // rewritten with the same content
	}
	o.active = &ov
	c := ov
	return OverrideChange{Changed: true, Override: &c}
}

// forget clears what was seen, after the agent removed the file itself.
func (o *overrideFile) forget() { o.present, o.active = false, nil }

// readOverride reads and strictly decodes an override file.
func readOverride(path string) (nodedrain.StatusOverride, error) {
	// One byte past the limit, so that the decoder says a file is too large.
	data, err := safefile.ReadAtMost(path, nodedrain.MaxPayloadSize+1)
	if err != nil {
		return nodedrain.StatusOverride{}, fmt.Errorf("override file: %w", err)
	}
	ov, err := nodedrain.DecodeOverride(data)
	if err != nil {
		return nodedrain.StatusOverride{}, fmt.Errorf("override file %s: %w", path, err)
	}
	return ov, nil
}

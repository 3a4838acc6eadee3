// Package safefile opens files whose paths others control (sentinels, override and state files
// on a host, mounted keys) so that whatever sits at the path cannot block or flood the reader: a
// FIFO is opened without waiting for a writer and refused, a device (a symlink to /dev/zero) is
// refused, and every read is bounded.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotRegular is matched by the error for a path that is neither a regular file nor, where
// allowed, a directory.
var ErrNotRegular = errors.New("not a regular file")

// Open opens path for reading without blocking (O_NONBLOCK: a FIFO opens at once) and checks,
// on the open file, that it is a regular file, or a directory when allowDir. The descriptor is
// switched back to blocking reads. A missing path gives an error matching fs.ErrNotExist.
func Open(path string, allowDir bool) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() && !(allowDir && fi.IsDir()) {
		_ = f.Close()
		return nil, nil, fmt.Errorf("%s is %w (%s)", path, ErrNotRegular, kind(fi.Mode()))
	}
	if err := syscall.SetNonblock(int(f.Fd()), false); err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// ReadFile reads a regular file of at most limit bytes; a larger one is an error.
func ReadFile(path string, limit int64) ([]byte, error) {
	data, err := ReadAtMost(path, limit+1)
	if err == nil && int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return data, err
}

// ReadAtMost reads the first n bytes of a regular file (all of a shorter one).
func ReadAtMost(path string, n int64) ([]byte, error) {
	f, _, err := Open(path, false)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, n))
}

func kind(m fs.FileMode) string {
	switch t := m.Type(); {
	case t&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case t&fs.ModeSocket != 0:
		return "a socket"
	case t&fs.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	default:
		return t.String()
	}
}

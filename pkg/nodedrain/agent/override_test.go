package agent

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

func TestOverrideFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "force.json")
	write := func(content string) {
		t.Helper()
		// Each write is a new file (rename), as editors and operators' tools do.
		tmp := path + ".tmp"
		require.NoError(t, os.WriteFile(tmp, []byte(content), 0o600))
		require.NoError(t, os.Rename(tmp, path))
	}
	complete := &nodedrain.StatusOverride{Status: nodedrain.StatusComplete, RequestedBy: nodedrain.RequesterDeviceOp}
	o := newOverrideFile(path)

	assert.Equal(t, OverrideChange{}, o.poll(), "no file: nothing")

	write(`{"Status":9,"RequestedBy":2}`)
	assert.Equal(t, OverrideChange{Changed: true, Override: complete}, o.poll(), "by number")
	assert.Equal(t, OverrideChange{}, o.poll(), "unchanged file: not read again")

	write(`{"Status":"COMPLETE","RequestedBy":"DEVICEOP"}`)
	assert.Equal(t, OverrideChange{}, o.poll(), "the same override by name changes nothing")

	write(`{"Status":"FAILEDDRAIN"}`)
	assert.Equal(t, OverrideChange{Changed: true, Override: &nodedrain.StatusOverride{Status: nodedrain.StatusFailedDrain}}, o.poll())

	write(`{"Status":12}`)
	ch := o.poll()
	require.Error(t, ch.Err, "invalid: reported")
	assert.False(t, ch.Changed, "invalid: changes nothing")
	assert.True(t, errors.Is(ch.Err, nodedrain.ErrInvalid))
	assert.Contains(t, ch.Err.Error(), path)
	assert.Equal(t, OverrideChange{}, o.poll(), "the same invalid file is reported once")

	require.NoError(t, os.Remove(path))
	assert.Equal(t, OverrideChange{Changed: true}, o.poll(), "removed: the override in force ends")
	assert.Equal(t, OverrideChange{}, o.poll())
}

func TestOverrideFileInvalid(t *testing.T) {
	tests := []struct {
		name, content string
		class         error
	}{
		{"empty", "", nodedrain.ErrMalformed},
		{"truncated", `{"Status":9,"Requ`, nodedrain.ErrMalformed},
		{"not an object", `[9]`, nodedrain.ErrMalformed},
		{"no status", `{"RequestedBy":2}`, nodedrain.ErrInvalid},
		{"unknown name", `{"Status":"DONE"}`, nodedrain.ErrInvalid},
		{"unknown requester", `{"Status":9,"RequestedBy":7}`, nodedrain.ErrInvalid},
		{"wrong type", `{"Status":true}`, nodedrain.ErrInvalid},
		{"too large", `{"Status":9,"x":"` + string(make([]byte, nodedrain.MaxPayloadSize)) + `"}`, nodedrain.ErrPayloadTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "force.json")
			require.NoError(t, os.WriteFile(path, []byte(tt.content), 0o600))
			o := newOverrideFile(path)
			ch := o.poll()
			require.Error(t, ch.Err)
			assert.True(t, errors.Is(ch.Err, tt.class), "%v", ch.Err)
			assert.False(t, ch.Changed)
			require.NoError(t, os.Remove(path))
			assert.Equal(t, OverrideChange{}, o.poll(), "removing an invalid file changes nothing either")
		})
	}
}

func TestOverrideFileDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "force.json")
	require.NoError(t, os.Mkdir(path, 0o700))
	o := newOverrideFile(path)
	assert.ErrorContains(t, o.poll().Err, "is a directory")
	assert.NoError(t, o.poll().Err, "reported once")
}

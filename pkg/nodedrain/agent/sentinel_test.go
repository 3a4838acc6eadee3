package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckSentinel(t *testing.T) {
	dir := t.TempDir()
	_, found, err := checkSentinel(OpReboot, filepath.Join(dir, "reboot-required"))
	require.NoError(t, err)
	assert.False(t, found)

	tests := []struct{ name, content, context string }{
		{"empty file", "", "update"},
		{"first line", "v1.2.3\nrelease notes\n", "update v1.2.3"},
		{"unprintable bytes dropped", "\x00v2\x1b[31m\n", "update v2[31m"},
		{"bounded", strings.Repeat("a", 300), "update " + strings.Repeat("a", maxSentinelLine) + "..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, tt.name)
			require.NoError(t, os.WriteFile(p, []byte(tt.content), 0o600))
			mtime := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			require.NoError(t, os.Chtimes(p, mtime, mtime))
			hit, found, err := checkSentinel(OpUpdate, p)
			require.NoError(t, err)
			require.True(t, found)
			assert.Equal(t, sentinelHit{op: OpUpdate, path: p, modTime: mtime.UnixNano(), context: tt.context}, hit)
		})
	}
}

func TestJittered(t *testing.T) {
	assert.Equal(t, time.Minute, jittered(time.Minute, 0))
	for range 100 {
		d := jittered(time.Minute, 30*time.Second)
		assert.GreaterOrEqual(t, d, time.Minute)
		assert.LessOrEqual(t, d, 90*time.Second)
	}
}

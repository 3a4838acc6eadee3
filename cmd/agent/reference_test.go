package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/cli/refpages"
)

// TestReferencePages keeps docs/reference/agent*.md what cobra's generator makes of the
// command: every flag with its default and environment variable. It fails when they differ; with
// EDGEDRAIN_UPDATE_REFERENCE=1 (make docs) it writes them.
func TestReferencePages(t *testing.T) {
	refpages.Isolate(t)
	pages, err := refpages.CommandPages(newRootCmd(nil), "cmd/agent")
	require.NoError(t, err)
	refpages.CheckPortable(t, pages)
	refpages.Check(t, pages, refpages.Owns("agent"))
}

// Every edgedrain metric a running agent serves is in docs/reference/metrics.md, whose agent
// registry (internal/cli/refpages) is filled as run fills the agent's: a metric registered by
// run and not there fails here.
func TestServedMetricsAreDocumented(t *testing.T) {
	t.Parallel()
	s := newScene(t, "metrics-doc", 0)
	a := s.newAgent("metrics-doc-0")
	a.startUnanswered()
	resp, err := http.Get("http://" + a.listenAddr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	page, err := os.ReadFile(filepath.Join(refpages.RepoRoot(t), refpages.Dir, "metrics.md"))
	require.NoError(t, err)
	served := 0
	for _, line := range strings.Split(string(body), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 4 && fields[1] == "TYPE" && strings.HasPrefix(fields[2], "edgedrain_") {
			served++
			assert.Contains(t, string(page), "| `"+fields[2]+"` | "+fields[3]+" |",
				"the agent serves %s, which docs/reference/metrics.md does not list: add its registration to internal/cli/refpages and run make docs", fields[2])
		}
	}
	assert.Greater(t, served, 5, "the agent's /metrics looks wrong:\n%s", body)
}

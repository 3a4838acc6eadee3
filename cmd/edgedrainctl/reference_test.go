package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/cli/refpages"
)

// TestReferencePages keeps docs/reference/edgedrainctl*.md what cobra's generator makes of the
// command: every flag with its default and environment variable. It fails when they differ; with
// EDGEDRAIN_UPDATE_REFERENCE=1 (make docs) it writes them.
func TestReferencePages(t *testing.T) {
	refpages.Isolate(t)
	pages, err := refpages.CommandPages(newRootCmd("edgedrainctl"), "cmd/edgedrainctl")
	require.NoError(t, err)
	refpages.CheckPortable(t, pages)
	refpages.Check(t, pages, refpages.Owns("edgedrainctl"))
}

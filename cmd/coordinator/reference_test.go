package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/cli/refpages"
)

// TestReferencePages keeps docs/reference/coordinator*.md what cobra's generator makes of the
// command: every flag with its default and environment variable. It fails when they differ; with
// EDGEDRAIN_UPDATE_REFERENCE=1 (make docs) it writes them.
func TestReferencePages(t *testing.T) {
	refpages.Isolate(t)
	pages, err := refpages.CommandPages(newCommand(nil), "cmd/coordinator")
	require.NoError(t, err)
	refpages.CheckPortable(t, pages)
	refpages.Check(t, pages, refpages.Owns("coordinator"))
}

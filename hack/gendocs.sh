#!/usr/bin/env bash
# Regenerates the generated documentation, docs/reference/, from the code (make docs):
#   coordinator.md, agent.md, edgedrainctl*.md  every command and flag, with its default and its
#                                               environment variable (cobra's Markdown generator)
#   metrics.md                                  every metric, gathered from Prometheus registries
#   wire.md                                     the bus's buckets, messages and enum numbers
# The same tests, run without EDGEDRAIN_UPDATE_REFERENCE (make test), fail when a page differs
# from what the code generates. -short: the packages' local cluster is not started for them.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
EDGEDRAIN_UPDATE_REFERENCE=1 "$GO" test -short -count=1 -run '^TestReferencePages$' \
	./cmd/coordinator ./cmd/agent ./cmd/edgedrainctl ./internal/cli/refpages
git status --short -- docs/reference 2>/dev/null || true

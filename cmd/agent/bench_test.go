package main

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
)

// BenchmarkCompleteToCommand measures the time from a COMPLETE published on the bus to the
// operation command started by the agent process (the command's first act is to read the
// clock, so `sh` and `date` start-up are included). The benchmark plays the coordinator on a
// bus-only scene; run it with
//
//	go test -short -run '^$' -bench CompleteToCommand -benchtime 50x ./cmd/agent
func BenchmarkCompleteToCommand(b *testing.B) {
	s := newScene(b, "bench", 0)
	a := s.newAgent("bench-0", "--log-level", "info")
	a.start()
	ctx := context.Background()
	var lat []time.Duration
	last := ""
	b.ResetTimer()
	for i := range b.N {
		_, err := agent.Request(ctx, a.socket, agent.OpUpdate, "bench")
		require.NoError(b, err)
		req := s.request("bench-0", last)
		last = req.RequestID
		published := time.Now()
		_, err = s.Statuses.Publish(ctx, "bench-0", testenv.SignStatus(nodedrain.NodeDrainStatus{Node: "bench-0", RequestID: req.RequestID,
			Status: nodedrain.StatusComplete, UpdatedAt: published}))
		require.NoError(b, err)
		runs := a.waitRuns(i+1, 10*time.Second)
		lat = append(lat, runs[i].at.Sub(published))
		// The update is over: the agent withdraws; answer as the coordinator does.
		s.waitWithdrawn("bench-0")
		_, err = s.Statuses.Publish(ctx, "bench-0", testenv.SignStatus(nodedrain.NodeDrainStatus{Node: "bench-0", Status: nodedrain.StatusNotRequested}))
		require.NoError(b, err)
		require.Eventually(b, func() bool {
			st, err := agent.QueryStatus(ctx, a.socket)
			return err == nil && st.State.Phase == agent.PhaseIdle && st.Status == nodedrain.StatusNotRequested
		}, 10*time.Second, time.Millisecond)
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[len(lat)*9/10]), "p90-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
	b.ReportMetric(ms(lat[0]), "min-ms")
}

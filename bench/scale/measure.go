package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// result is one fleet's figures.
type result struct {
	nodes, drains      int
	wall               time.Duration
	cpu                time.Duration
	rss, peak          int64
	msgs, idleMsgs     int64   // during the drains; the idle fleet's over the same time
	delayP50, delayP99 float64 // seconds, at the agents
	delays             uint64
	admitP50, admitP99 float64 // seconds, one admission pass
	admitMean          float64
	admissions         uint64
}

func (f *fleet) measure(ctx context.Context) (result, error) {
	r := result{nodes: f.n, drains: f.p.drains}
	// The idle fleet's traffic (watch heartbeats, bus probes) over -idle.
	m0, err := f.msgs()
	if err != nil {
		return r, err
	}
	time.Sleep(f.p.idle)
	m1, err := f.msgs()
	if err != nil {
		return r, err
	}
	idleRate := float64(m1-m0) / f.p.idle.Seconds()
	cpu0, _, _, err := f.coordinatorProc()
	if err != nil {
		return r, err
	}
	start := time.Now()
	for _, node := range f.nodes[:f.p.drains] {
		if _, err := agent.Request(ctx, f.path(node, "a.sock"), agent.OpUpdate, "update"); err != nil {
			return r, fmt.Errorf("ask %s for an update: %w", node, err)
		}
	}
	if err := f.waitDone(ctx, f.nodes[:f.p.drains]); err != nil {
		return r, err
	}
	r.wall = time.Since(start)
	m2, err := f.msgs()
	if err != nil {
		return r, err
	}
	r.msgs, r.idleMsgs = m2-m1, int64(idleRate*r.wall.Seconds())
	cpu1, rss, peak, err := f.coordinatorProc()
	if err != nil {
		return r, err
	}
	r.cpu, r.rss, r.peak = cpu1-cpu0, rss, peak
	h, err := gatherHistogram(f.reg, "edgedrain_agent_status_delay_seconds")
	if err != nil {
		return r, err
	}
	r.delays, r.delayP50, r.delayP99 = h.GetSampleCount(), quantile(h, 0.5), quantile(h, 0.99)
	text, err := f.coordinatorMetrics(ctx)
	if err != nil {
		return r, err
	}
	if h, err = parseHistogram(text, "edgedrain_admission_decision_seconds"); err != nil {
		return r, err
	}
	r.admissions, r.admitP50, r.admitP99 = h.GetSampleCount(), quantile(h, 0.5), quantile(h, 0.99)
	r.admitMean = h.GetSampleSum() / math.Max(1, float64(h.GetSampleCount()))
	return r, nil
}

// waitDone waits until every node's update ran and its drain is over: NOTREQUESTED on the bus
// for the request, node uncordoned by the coordinator (the return gate passed).
func (f *fleet) waitDone(ctx context.Context, nodes []string) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, node := range nodes {
			st, _, err := f.statuses.Get(ctx, node)
			if err != nil || st.Status != nodedrain.StatusNotRequested || st.RequestID == "" || st.CordonedByUs || !st.ReturningSince.IsZero() {
				return false, nil
			}
		}
		return true, nil
	})
}

func openStatuses(ctx context.Context, js jetstream.JetStream) (*pubsub.Bucket[nodedrain.NodeDrainStatus], error) {
	// The coordinator creates the bucket when it starts; wait for it.
	var b *pubsub.Bucket[nodedrain.NodeDrainStatus]
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		b, err = pubsub.OpenBucket(ctx, js, pubsub.BucketConfig{Name: nodedrain.StatusBucket, OpenOnly: true}, nodedrain.StatusCodec{})
		return err == nil, nil
	})
	return b, err
}

func listenPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func gatherHistogram(g prometheus.Gatherer, name string) (*dto.Histogram, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, err
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetHistogram(), nil
		}
	}
	return nil, fmt.Errorf("no histogram %s", name)
}

// parseHistogram finds histogram name in a /metrics page (Prometheus's own text parser).
func parseHistogram(text, name string) (*dto.Histogram, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	mf, ok := mfs[name]
	if !ok || len(mf.GetMetric()) != 1 {
		return nil, errors.New("no histogram " + name + " on the coordinator's /metrics")
	}
	return mf.GetMetric()[0].GetHistogram(), nil
}

// quantile estimates the q-quantile of h as Prometheus's histogram_quantile does: linearly
// within the bucket that holds it.
func quantile(h *dto.Histogram, q float64) float64 {
	total := float64(h.GetSampleCount())
	if total == 0 {
		return math.NaN()
	}
	rank, lower, below := q*total, 0.0, 0.0
	for _, b := range h.GetBucket() {
		upper, count := b.GetUpperBound(), float64(b.GetCumulativeCount())
		if count >= rank {
			if count == below {
				return upper
			}
			return lower + (upper-lower)*(rank-below)/(count-below)
		}
		lower, below = upper, count
	}
	return lower // beyond the last bucket: its bound, a lower bound of the truth
}

func printResults(rs []result, p params) {
	row := func(label string, f func(r result) string) {
		fmt.Printf("  %-44s", label)
		for _, r := range rs {
			fmt.Printf(" %22s", f(r))
		}
		fmt.Println()
	}
	ms := func(s float64) string { return fmt.Sprintf("%.2f ms", s*1000) }
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	fmt.Println()
	row("nodes", func(r result) string { return fmt.Sprint(r.nodes) })
	row(fmt.Sprintf("drains (max-concurrent-drains %d)", p.concurrency), func(r result) string { return fmt.Sprint(r.drains) })
	row("first request to last drain over", func(r result) string { return r.wall.Round(100 * time.Millisecond).String() })
	row("coordinator CPU during the drains", func(r result) string { return r.cpu.String() })
	row("coordinator RSS after / peak", func(r result) string { return mib(r.rss) + " / " + mib(r.peak) })
	row("NATS messages per drain (net of idle)", func(r result) string {
		return fmt.Sprintf("%.0f", float64(r.msgs-r.idleMsgs)/float64(r.drains))
	})
	row("NATS messages per drain (raw)", func(r result) string { return fmt.Sprintf("%.0f", float64(r.msgs)/float64(r.drains)) })
	row("status delay at the agents p50 / p99", func(r result) string { return ms(r.delayP50) + " / " + ms(r.delayP99) })
	row("  (statuses observed)", func(r result) string { return fmt.Sprint(r.delays) })
	row("admission pass p50 / p99", func(r result) string { return ms(r.admitP50) + " / " + ms(r.admitP99) })
	row("admission pass mean (passes)", func(r result) string { return fmt.Sprintf("%s (%d)", ms(r.admitMean), r.admissions) })
	fmt.Println("\n  (percentiles interpolated within histogram buckets, as histogram_quantile does)")
}

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/busauth"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

const target = "node-1"

type demo struct {
	out     io.Writer
	keep    bool
	dir     string
	bin     string // our binaries
	c       *testenv.Cluster
	stopCP  func()
	procs   map[string]*process
	natsURL string
	metrics string
	start   time.Time
	keyEnv  []string // points the programs at the demo's status signing key
	// The limits main builds and runs under, for what the demo says (zero: not said).
	buildTimeout, timeout time.Duration
}

func (d *demo) say(format string, args ...any) {
	elapsed := ""
	if !d.start.IsZero() {
		elapsed = fmt.Sprintf("%5.1fs ", time.Since(d.start).Seconds())
	}
	fmt.Fprintf(d.out, "%s%s\n", elapsed, fmt.Sprintf(format, args...))
}

// build makes the demo's directory and builds what it runs: the local cluster's binaries (the
// first time only: 15-40 minutes on 2 cores, cached afterwards) and edgedrain's programs.
func (d *demo) build(ctx context.Context) error {
	var err error
	if d.dir, err = os.MkdirTemp("", "edgedrain-demo-"); err != nil {
		return err
	}
	d.procs = map[string]*process{}
	d.say("== edgedrain demo: a node's reboot, drained and kept safe ==")
	limits := ""
	if d.buildTimeout > 0 {
		limits = fmt.Sprintf("; limit %s (EDGEDRAIN_BUILD_TIMEOUT), and the demo's own %s clock starts after it",
			testenv.ShortDuration(d.buildTimeout), testenv.ShortDuration(d.timeout))
	}
	d.say("building the local cluster's binaries once into %s: 15-40 minutes on 2 cores the first time, "+
		"seconds afterwards%s; progress below...", cacheDir(), limits)
	start := time.Now()
	if _, err := testenv.BuildClusterBinaries(ctx); err != nil {
		return err
	}
	d.say("building coordinator, agent and edgedrainctl...")
	if d.bin, err = buildBinaries(ctx, d.dir); err != nil {
		return err
	}
	took := time.Since(start).Round(time.Second)
	if d.timeout > 0 {
		d.say("built in %s; the demo's %s clock starts now", took, testenv.ShortDuration(d.timeout))
	} else {
		d.say("built in %s", took)
	}
	return nil
}

// cacheDir is where hack/cluster-bins.sh keeps the binaries, home written as ~.
func cacheDir() string {
	dir := os.Getenv("EDGEDRAIN_CACHE")
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return "~/.cache/edgedrain"
		}
		dir = filepath.Join(base, "edgedrain")
	}
	if home, err := os.UserHomeDir(); err == nil && strings.HasPrefix(dir, home+"/") {
		dir = "~" + strings.TrimPrefix(dir, home)
	}
	return dir
}

// run runs the demo (after build, which it calls when that has not run).
func (d *demo) run(ctx context.Context) error {
	var err error
	if d.bin == "" {
		if err := d.build(ctx); err != nil {
			return err
		}
	}
	if err := d.makeKeys(); err != nil {
		return err
	}
	d.say("starting a local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok)...")
	if d.c, d.stopCP, err = testenv.StartCluster(ctx); err != nil {
		return err
	}
	if err := d.createWorld(ctx); err != nil {
		return err
	}
	if err := d.createIdentities(ctx); err != nil {
		return err
	}
	if err := d.startCoordinator(ctx); err != nil {
		return err
	}
	for _, n := range nodeNames {
		if err := d.startAgent(ctx, n, "boot-1"); err != nil {
			return err
		}
	}
	js, closeBus, err := d.connect()
	if err != nil {
		return err
	}
	defer closeBus()
	d.start = time.Now()
	done := make(chan error, 1)
	go func() { done <- d.watch(ctx, js) }()
	go d.watchPods(ctx)
	go d.simulateRebuild(ctx)

	d.say("%s wants a reboot: writing its sentinel file /run/reboot-required", target)
	if err := os.WriteFile(d.nodePath(target, "reboot-required"), nil, 0o644); err != nil {
		return err
	}
	select {
	case err := <-done:
		if err != nil {
			return err
		}
	case <-ctx.Done():
		return fmt.Errorf("the demo did not finish: %w (logs in %s)", ctx.Err(), d.dir)
	}
	d.printMetrics(ctx)
	d.say("")
	d.say("Look further while it runs:")
	d.say("  export KUBECONFIG=%s", d.c.Kubeconfig)
	d.say("  %s get nodes", filepath.Join(d.c.BinDir, "kubectl"))
	d.say("  %s --nats-url %s --nats-user %s --nats-password-file %s status", filepath.Join(d.bin, "edgedrainctl"), d.natsURL,
		busauth.OperatorUser, d.operatorPasswordFile())
	d.say("  curl -s %s | grep edgedrain_", d.metrics)
	d.say("  logs: %s", d.dir)
	if d.keep {
		d.say("Press Enter (or Ctrl-C) to stop and clean up.")
		enter := make(chan struct{})
		go func() { _, _ = bufio.NewReader(os.Stdin).ReadString('\n'); close(enter) }()
		select {
		case <-enter:
		case <-ctx.Done():
		}
	}
	return nil
}

// watch prints every status change of every node until the target's reboot has come full
// circle: COMPLETE, the reboot command, the node back and uncordoned, and healthy again (its
// replica caught up) so that its admission slot is free.
func (d *demo) watch(ctx context.Context, js jetstream.JetStream) error {
	// The coordinator creates its buckets after its bus is up; the demo connects as the
	// operator, who may not create them (a create would go unanswered), so it waits for them.
	var statuses *pubsub.Bucket[nodedrain.NodeDrainStatus]
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		statuses, err = pubsub.OpenBucket(ctx, js, pubsub.BucketConfig{Name: nodedrain.StatusBucket, OpenOnly: true}, nodedrain.StatusCodec{})
		if errors.Is(err, pubsub.ErrBucketMissing) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("opening the status bucket: %w", err)
	}
	w, err := statuses.Watch(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	var completed, rebooted, uncordoned bool
	last := map[string]string{}
	rebootDone := d.waitRebootCommand(ctx)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-rebootDone:
			rebootDone = nil
			if !completed {
				return fmt.Errorf("the agent ran the reboot command before %s's drain was COMPLETE", target)
			}
			d.say("%s: the agent ran the reboot command (after COMPLETE)", target)
			if err := d.resyncAfterReboot(ctx); err != nil {
				return err
			}
			d.say("%s reboots... and is back: new boot ID, agent restarted", target)
			if err := d.restartAgent(ctx, target, "boot-2"); err != nil {
				return err
			}
			rebooted = true
		case ev, ok := <-w.Events():
			if !ok {
				return errors.New("status watch ended")
			}
			if ev.Kind != pubsub.EventPut {
				continue
			}
			st := ev.Value
			line := fmt.Sprintf("%-8s %-13s %s", st.Node, st.Status, st.Message)
			if st.Attempt > 1 {
				line += fmt.Sprintf(" (attempt %d)", st.Attempt)
			}
			if line != last[st.Node] {
				last[st.Node] = line
				d.say("%s", line)
				for _, b := range st.Blockers {
					d.say("           blocked by %s %s: %s", strings.ToLower(string(b.Kind)), b.Name, b.Reason)
				}
			}
			if st.Node != target {
				continue
			}
			if st.Status == nodedrain.StatusComplete {
				completed = true
			}
			if !completed || !rebooted || st.Status != nodedrain.StatusNotRequested || st.CordonedByUs {
				continue
			}
			if !uncordoned {
				if err := d.checkUncordoned(ctx); err != nil {
					return err
				}
				uncordoned = true
			}
			if st.ReturningSince.IsZero() {
				d.say("%s is healthy again: its admission slot is free for the next node (the return gate)", target)
				return nil
			}
		}
	}
}

func (d *demo) checkUncordoned(ctx context.Context) error {
	node, err := d.c.Client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if node.Spec.Unschedulable {
		return fmt.Errorf("%s is still cordoned after its request was withdrawn", target)
	}
	d.say("%s is schedulable again: the reboot went through with its data safe", target)
	return nil
}

// waitRebootCommand closes the returned channel once the target's reboot command has run.
func (d *demo) waitRebootCommand(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
			_, err := os.Stat(d.nodePath(target, "rebooted"))
			return err == nil, nil
		})
		if err == nil {
			close(ch)
		}
	}()
	return ch
}

func (d *demo) printMetrics(ctx context.Context) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.metrics, nil)
	if err != nil {
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.say("could not read the coordinator's metrics: %v", err)
		return
	}
	defer resp.Body.Close()
	d.say("")
	d.say("The coordinator's drain completion-time metric (request to end, seconds):")
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "edgedrain_drain_completion_time_seconds_sum") ||
			strings.HasPrefix(l, "edgedrain_drain_completion_time_seconds_count") {
			d.say("  %s", l)
		}
	}
}

// cleanup stops everything; it removes the demo's directory too unless the demo failed (its
// logs are there).
func (d *demo) cleanup(removeDir bool) {
	for _, p := range d.procs {
		p.stop()
	}
	if d.stopCP != nil {
		d.stopCP()
	}
	if d.dir != "" && removeDir {
		_ = os.RemoveAll(d.dir)
	}
}

func (d *demo) nodePath(node, name string) string { return filepath.Join(d.dir, node, name) }

func buildBinaries(ctx context.Context, dir string) (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "bin")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin+"/", "./cmd/coordinator", "./cmd/agent", "./cmd/edgedrainctl")
	cmd.Dir = root
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// main says which limit it was.
			return "", fmt.Errorf("go build (coordinator, agent, edgedrainctl) killed after %s by its time limit",
				time.Since(start).Round(time.Second))
		}
		return "", fmt.Errorf("go build: %w\n%s", err, out)
	}
	return bin, nil
}

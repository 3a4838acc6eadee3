package main

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/edgedrain/edgedrain/internal/testenv"
)

// Replica addresses are only data in the Longhorn objects; nothing connects to them.
const (
	logsOnTarget = "127.0.1.11:10000"
	logsOnOther  = "127.0.1.12:10000"
)

// createVolumes creates Longhorn's view of two volumes: "db" with healthy replicas on every node
// (safe), and "logs" whose only healthy replica is on the node to be rebooted while its second
// replica is being rebuilt from it on node-2 (not safe until the rebuild finishes).
func (d *demo) createVolumes(ctx context.Context) error {
	_, err := d.c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testenv.LonghornNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	objs := []*unstructured.Unstructured{}
	for _, n := range nodeNames {
		objs = append(objs, testenv.LonghornNode(n, true))
	}
	objs = append(objs,
		testenv.LonghornVolume("db", 3, "attached", appNamespace, "data-db"),
		testenv.LonghornReplica("db-r0", "db", "node-0", "healthy", "127.0.1.1"),
		testenv.LonghornReplica("db-r1", "db", "node-1", "healthy", "127.0.1.2"),
		testenv.LonghornReplica("db-r2", "db", "node-2", "healthy", "127.0.1.3"),
		dbEngine(100),
		testenv.LonghornVolume("logs", 2, "attached", appNamespace, "logs"),
		testenv.LonghornReplica("logs-r1", "logs", target, "healthy", "127.0.1.11"),
		testenv.LonghornReplica("logs-r2", "logs", "node-2", "rebuilding", "127.0.1.12"),
		logsEngine(0),
	)
	if _, err := testenv.ApplyLonghorn(ctx, d.c.Dynamic, objs...); err != nil {
		return err
	}
	d.say("Longhorn volumes: db (healthy replicas on all 3 nodes), logs (last healthy replica on %s, "+
		"a second one rebuilding from it on node-2)", target)
	return nil
}

func logsEngine(progress int64) *unstructured.Unstructured {
	addrs := map[string]string{"logs-r1": "tcp://" + logsOnTarget, "logs-r2": "tcp://" + logsOnOther}
	if progress >= 100 {
		return testenv.LonghornEngine("logs", target, addrs, map[string]string{"logs-r1": "RW", "logs-r2": "RW"})
	}
	return testenv.LonghornEngine("logs", target, addrs, map[string]string{"logs-r1": "RW", "logs-r2": "WO"},
		testenv.Rebuild{To: logsOnOther, Progress: progress, From: []string{logsOnTarget}})
}

// dbEngine is the db volume's Engine; below 100 its replica on the target catches up from the
// one on node-0 (after the target's reboot).
func dbEngine(progress int64) *unstructured.Unstructured {
	addrs := map[string]string{"db-r0": "tcp://127.0.1.1:10000", "db-r1": "tcp://127.0.1.2:10000", "db-r2": "tcp://127.0.1.3:10000"}
	if progress >= 100 {
		return testenv.LonghornEngine("db", "node-0", addrs, map[string]string{"db-r0": "RW", "db-r1": "RW", "db-r2": "RW"})
	}
	return testenv.LonghornEngine("db", "node-0", addrs, map[string]string{"db-r0": "RW", "db-r1": "WO", "db-r2": "RW"},
		testenv.Rebuild{To: "127.0.1.2:10000", Progress: progress, From: []string{"127.0.1.1:10000"}})
}

// resyncAfterReboot plays Longhorn catching up the target's db replica after its reboot: it
// rebuilds at once (the return gate holds the target's admission slot meanwhile), 50% more every
// 1.5 s, then healthy.
func (d *demo) resyncAfterReboot(ctx context.Context) error {
	if _, err := testenv.ApplyLonghorn(ctx, d.c.Dynamic, dbEngine(0),
		testenv.LonghornReplica("db-r1", "db", target, "rebuilding", "127.0.1.2")); err != nil {
		return err
	}
	d.say("  (Longhorn) volume db: replica on %s catching up after the reboot", target)
	go func() {
		for progress := int64(50); progress <= 100; progress += 50 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(1500 * time.Millisecond):
			}
			objs := []*unstructured.Unstructured{dbEngine(progress)}
			if progress == 100 {
				objs = append(objs, testenv.LonghornReplica("db-r1", "db", target, "healthy", "127.0.1.2"))
			}
			// Said before it is written: the coordinator reacts to the write, and its next status
			// could otherwise be printed before the line that explains it.
			d.say("  (Longhorn) volume db: replica on %s %d%% caught up", target, progress)
			if _, err := testenv.ApplyLonghorn(ctx, d.c.Dynamic, objs...); err != nil {
				d.say("simulated resync: %v", err)
				return
			}
		}
	}()
	return nil
}

// simulateRebuild plays Longhorn rebuilding the logs volume's second replica: 25% more every
// 1.5 s, then healthy.
func (d *demo) simulateRebuild(ctx context.Context) {
	for progress := int64(25); progress <= 100; progress += 25 {
		select {
		case <-ctx.Done():
			return
		case <-time.After(1500 * time.Millisecond):
		}
		objs := []*unstructured.Unstructured{logsEngine(progress)}
		if progress == 100 {
			objs = append(objs, testenv.LonghornReplica("logs-r2", "logs", "node-2", "healthy", "127.0.1.12"))
		}
		// (Said before it is written, as in resyncAfterReboot.)
		if progress == 100 {
			d.say("  (Longhorn) volume logs: replica on node-2 rebuilt and healthy")
		} else {
			d.say("  (Longhorn) volume logs: rebuilding on node-2 %d%%", progress)
		}
		if _, err := testenv.ApplyLonghorn(ctx, d.c.Dynamic, objs...); err != nil {
			d.say("simulated rebuild: %v", err)
			return
		}
	}
}

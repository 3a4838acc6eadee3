package coordinator

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/kubectl/pkg/drain"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Issue 23, defect 4 (invariant S4: a cordon edgedrain did not make is never removed): an
// operator who runs kubectl uncordon, then kubectl cordon, on a node edgedrain cordoned leaves
// edgedrain's annotation in place (kubectl touches only spec.unschedulable). That cordon is the
// operator's; each test below drives one of the three paths that took it for edgedrain's.

// operator is someone at kubectl: cordon and uncordon go through kubectl's own code, under
// kubectl's user agent (so the API server records the writes as kubectl's, as it does for
// the real command).
type operator struct {
	t      *testing.T
	h      *harness
	client kubernetes.Interface
}

func newOperator(t *testing.T, h *harness) *operator {
	t.Helper()
	rc := rest.CopyConfig(h.c.Admin)
	rc.UserAgent = "kubectl/v1.37.1 (linux/amd64) kubernetes/test"
	client, err := kubernetes.NewForConfig(rc)
	require.NoError(t, err)
	return &operator{t: t, h: h, client: client}
}

// set runs kubectl cordon (desired true) or kubectl uncordon (false) on node.
func (o *operator) set(node string, desired bool) {
	o.t.Helper()
	d := &drain.Helper{Ctx: context.Background(), Client: o.client, Out: io.Discard, ErrOut: io.Discard}
	require.NoError(o.t, drain.RunCordonOrUncordon(d, o.h.node(node), desired))
	require.Equal(o.t, desired, o.h.node(node).Spec.Unschedulable)
}

func (o *operator) cordon(node string)   { o.set(node, true) }
func (o *operator) uncordon(node string) { o.set(node, false) }

// withdrawnAndSettled matches the NOTREQUESTED of request id once nothing more is under way
// for it (no uncordon announced or in progress).
func withdrawnAndSettled(id string) func(nodedrain.NodeDrainStatus) bool {
	return func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusNotRequested && s.RequestID == id && !strings.Contains(s.Message, "uncordoning")
	}
}

// The check before COMPLETE: the operator uncordons and cordons again while the drain waits
// for its volumes. The node was schedulable for a moment, so edgedrain drains it again, and
// the cordon it finds is the operator's: the withdrawal leaves it.
func TestOperatorRecordonDuringTheDrainOutlastsIt(t *testing.T) {
	h := newHarness(t, "recordon-check", 2)
	target := h.nodes[0]
	gate := &testGate{safe: map[string]bool{}}
	cfg := h.config(h.c.Client)
	cfg.Gate = gate
	h.run(cfg)
	h.request(target, "r1", time.Now())
	h.waitFor(target, 20*time.Second, "cordoned, the volume gate blocking", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusCordoned && len(s.Blockers) > 0
	})
	op := newOperator(t, h)
	op.uncordon(target)
	op.cordon(target)
	gate.set(target, true)

	st := h.waitStatus(target, nodedrain.StatusComplete, 30*time.Second)
	assert.False(t, st.CordonedByUs, "COMPLETE claims the operator's cordon as edgedrain's")
	h.withdraw(target)
	h.waitFor(target, 10*time.Second, "withdrawn, nothing left to do", withdrawnAndSettled("r1"))
	n := h.node(target)
	assert.True(t, n.Spec.Unschedulable, "edgedrain removed the operator's cordon")
	assert.NotContains(t, n.Annotations, CordonAnnotation, "edgedrain's record of a cordon that is not its own is left")
}

// lostReplies is a transport fault on one Node object: armed, the first PATCH of it reaches the
// API server and lands but its reply is lost, and every later GET or PATCH of it fails unsent, until
// released (a connection that broke under a cordon). Lists, watches and the status
// subresource pass.
type lostReplies struct {
	next  http.RoundTripper
	path  string
	armed atomic.Bool
	down  atomic.Bool
}

func (l *lostReplies) RoundTrip(req *http.Request) (*http.Response, error) {
	if !l.armed.Load() || req.URL.Path != l.path {
		return l.next.RoundTrip(req)
	}
	if l.down.Load() {
		return nil, errors.New("simulated broken connection")
	}
	if req.Method != http.MethodPatch {
		return l.next.RoundTrip(req)
	}
	resp, err := l.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err // (a conflict is answered: the cordon is decided again)
	}
	_ = resp.Body.Close()
	l.down.Store(true)
	return nil, errors.New("simulated broken connection: the reply to the cordon was lost")
}

// cordonOnce: edgedrain's cordon lands but its reply is lost; before its retry reads the node
// again, the operator uncordons and cordons it. The retry finds the node cordoned and
// edgedrain's annotation still there: that cordon is the operator's all the same.
func TestOperatorRecordonAfterALostCordonReplyIsKept(t *testing.T) {
	h := newHarness(t, "recordon-lost", 2)
	target := h.nodes[0]
	fault := &lostReplies{path: "/api/v1/nodes/" + target}
	rc := rest.CopyConfig(h.c.Admin)
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { fault.next = rt; return fault })
	client, err := kubernetes.NewForConfig(rc)
	require.NoError(t, err)
	h.run(h.config(client))
	fault.armed.Store(true)
	h.request(target, "r1", time.Now())
	require.Eventually(t, func() bool {
		_, ours := h.node(target).Annotations[CordonAnnotation]
		return ours && fault.down.Load()
	}, 20*time.Second, 20*time.Millisecond, "edgedrain's cordon never landed")
	h.waitFor(target, 10*time.Second, "retrying the cordon", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusStarting && strings.Contains(s.Message, "cannot reach the Kubernetes API")
	})
	op := newOperator(t, h)
	op.uncordon(target)
	op.cordon(target)
	fault.armed.Store(false)

	st := h.waitStatus(target, nodedrain.StatusComplete, 30*time.Second)
	assert.False(t, st.CordonedByUs, "COMPLETE claims the operator's cordon as edgedrain's")
	h.withdraw(target)
	h.waitFor(target, 10*time.Second, "withdrawn, nothing left to do", withdrawnAndSettled("r1"))
	n := h.node(target)
	assert.True(t, n.Spec.Unschedulable, "edgedrain removed the operator's cordon")
	assert.NotContains(t, n.Annotations, CordonAnnotation, "edgedrain's record of a cordon that is not its own is left")
}

// The sweep at resume: the request is withdrawn while no coordinator runs, and the operator
// uncordons and cordons the node meanwhile. The coordinator that starts finds edgedrain's
// annotation on a cordoned node, and leaves the cordon (the operator's) where it is.
func TestOperatorRecordonWhileNoCoordinatorRunsIsKept(t *testing.T) {
	h := newHarness(t, "recordon-resume", 2)
	target := h.nodes[0]
	stop := h.run(h.config(h.c.Client))
	h.request(target, "r1", time.Now())
	st := h.waitStatus(target, nodedrain.StatusComplete, 30*time.Second)
	require.True(t, st.CordonedByUs)
	stop()
	h.withdraw(target)
	op := newOperator(t, h)
	op.uncordon(target)
	op.cordon(target)

	h.run(h.config(h.c.Client))
	// (The node is back from its operation: the return gate follows the uncordon.)
	h.waitFor(target, 20*time.Second, "the resumed drain settled", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusNotRequested && strings.HasPrefix(s.Message, "idle;")
	})
	n := h.node(target)
	assert.True(t, n.Spec.Unschedulable, "edgedrain removed the operator's cordon")
	assert.NotContains(t, n.Annotations, CordonAnnotation, "edgedrain's record of a cordon that is not its own is left")
	h.waitFor(target, time.Second, "a status saying the node was left cordoned", func(s nodedrain.NodeDrainStatus) bool {
		return strings.Contains(s.Message, "left cordoned")
	})
}

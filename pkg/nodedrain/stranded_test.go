package nodedrain

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A cordon whose client gave up can land after its drain ended (withdrawn, its uncordon found no
// record): the informer showing edgedrain's record on the node of an idle drain uncordons it;
// a drain with something under way, or holding its cordon, answers for it itself.
func TestCordonFoundOnAnIdleDrainIsUndone(t *testing.T) {
	r := newRun(t).step(EvRequest{Request: req("a")}).step(EvAdmit{}).expect(StatusStarting, OpCordon)
	r.step(EvCordonFound{}).expect(StatusStarting) // its cordon is under way
	timedOut := func(e *EvResult) { e.Err, e.Unreachable = errors.New("context deadline exceeded"), true }
	r.ok(OpCordon, timedOut).expect(StatusStarting)
	r.step(EvRequest{}).expect(StatusNotRequested, OpUncordon) // withdrawn
	r.step(EvCordonFound{}).expect(StatusNotRequested)         // its uncordon is under way
	r.ok(OpUncordon).expect(StatusNotRequested)
	assert.False(t, r.d.Status.CordonedByUs)

	// The cordon lands late: the next admission pass sees the record.
	r.step(EvCordonFound{}).expect(StatusNotRequested, OpUncordon)
	assert.True(t, r.d.Status.CordonedByUs)
	assert.Contains(t, r.d.Status.Message, "cordon record is on the node")
	r.ok(OpUncordon).expect(StatusNotRequested)
	assert.False(t, r.d.Status.CordonedByUs)

	// A drain holding its cordon is not touched.
	r = newRun(t).step(EvRequest{Request: req("b")}).step(EvAdmit{}).ok(OpCordon).ok(OpGate)
	r.step(EvCordonFound{}).expect(StatusCordoned)
}

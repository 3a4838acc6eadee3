package agent

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

func TestStepRestart(t *testing.T) {
	// before plays up to a point, then the agent "restarts": only State survives.
	restart := func(t *testing.T, before []step, boot string, after ...step) (Machine, []string) {
		t.Helper()
		m, clock, _ := play(t, fresh(), before)
		m2 := Machine{Node: m.Node, State: m.State}
		steps := append([]step{at(time.Second, EvStart{BootID: boot})}, after...)
		var out []string
		p := testPolicy()
		for _, s := range steps {
			clock = clock.Add(s.after)
			var acts []Action
			m2, acts = Step(m2, s.ev, clock, p)
			for _, a := range acts {
				if s := summary(a); s != "" {
					out = append(out, s)
				}
			}
		}
		return m2, out
	}
	deferred := seq(up, []step{now(sentinel(OpReboot, "r1", 42)), now(pubOK("r1")), now(status(nodedrain.StatusCordoned, "r1"))})
	ran := seq(deferred, []step{now(status(nodedrain.StatusComplete, "r1")), now(EvCommandDone{RequestID: "r1"})})

	t.Run("same boot, deferred: the request is published again and still waits for COMPLETE", func(t *testing.T) {
		m, got := restart(t, deferred, "b1", now(pubOK("r1")), now(status(nodedrain.StatusCordoned, "r1")), now(EvBusSnapshot{}),
			now(status(nodedrain.StatusComplete, "r1")))
		assert.Equal(t, []string{"publish r1", "run reboot r1 #1"}, got)
		assert.Equal(t, PhaseRunning, m.State.Phase)
	})
	t.Run("new boot after the reboot ran: withdraw, idle, sentinel handled", func(t *testing.T) {
		m, got := restart(t, ran, "b2", now(wdOK), now(EvBusSnapshot{}), now(sentinel(OpReboot, "r2", 42)))
		assert.Equal(t, []string{"withdraw", "refused"}, got)
		assert.Equal(t, PhaseIdle, m.State.Phase)
		assert.Equal(t, int64(42), m.State.Handled[OpReboot])
	})
	t.Run("new boot while still deferred: withdraw, idle, the sentinel asks again", func(t *testing.T) {
		m, got := restart(t, deferred, "b2", now(wdOK), now(EvBusSnapshot{}), now(sentinel(OpReboot, "r2", 42)))
		assert.Equal(t, []string{"withdraw", "accepted", "publish r2"}, got)
		assert.Equal(t, PhaseDeferred, m.State.Phase)
	})
	t.Run("same boot while the reboot command ran: wait for the node to go down", func(t *testing.T) {
		running := seq(deferred, []step{now(status(nodedrain.StatusComplete, "r1"))})
		m, got := restart(t, running, "b1", now(pubOK("r1")), at(5*time.Minute, EvTimer{}))
		assert.Equal(t, []string{"publish r1", "command-failed #1"}, got)
		assert.Equal(t, PhaseCleared, m.State.Phase)
	})
	t.Run("same boot while the update command ran: it counts as failed and runs again", func(t *testing.T) {
		running := seq(up, []step{now(trigger(OpUpdate, "r1")), now(pubOK("r1")), now(status(nodedrain.StatusComplete, "r1"))})
		m, got := restart(t, running, "b1", now(pubOK("r1")), at(10*time.Second, EvTimer{}))
		assert.Equal(t, []string{"command-failed #1", "publish r1", "run update r1 #2"}, got)
		assert.Equal(t, PhaseRunning, m.State.Phase)
	})
	t.Run("idle: a request the coordinator still serves is withdrawn", func(t *testing.T) {
		m, got := restart(t, nil, "b1", now(wdOK), now(status(nodedrain.StatusComplete, "r0")), now(EvBusSnapshot{}),
			now(status(nodedrain.StatusComplete, "r0")))
		assert.Equal(t, []string{"withdraw", "withdraw"}, got)
		assert.Equal(t, PhaseIdle, m.State.Phase)
	})
}

func TestStepBusFailuresRetry(t *testing.T) {
	boom := errors.New("nats: timeout")
	steps := seq(up, []step{now(trigger(OpReboot, "r1")), now(EvBusDone{Publish: true, RequestID: "r1", Err: boom}),
		at(time.Second, EvTimer{}), at(time.Second, EvTimer{}), now(EvBusDone{Publish: true, RequestID: "r1", Err: boom}),
		at(2*time.Second, EvTimer{}), now(pubOK("r1")), at(time.Hour, EvTimer{})})
	m, _, got := play(t, fresh(), steps)
	assert.Equal(t, []string{"withdraw", "accepted", "publish r1", "publish r1", "publish r1"}, got)
	assert.True(t, m.BusSynced)
	assert.Zero(t, m.BusFailures)
	assert.True(t, m.NextWake().IsZero())
}

package policy

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

func TestOrderPriority(t *testing.T) {
	sel := func(s string) labels.Selector {
		t.Helper()
		l, err := labels.Parse(s)
		require.NoError(t, err)
		return l
	}
	o := Order{
		RequesterPriority: map[nodedrain.Requester]int{nodedrain.RequesterDeviceOp: 10, nodedrain.RequesterUpdate: -2},
		NodePriority: []NodePriority{
			{Selector: sel("tier=edge,critical"), Priority: 100},
			{Selector: sel("tier=edge"), Priority: 5},
			{Selector: sel("!node-role.kubernetes.io/control-plane"), Priority: 1},
		},
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		r      nodedrain.Requester
		want   int
	}{
		{"requester only, no node match", map[string]string{"node-role.kubernetes.io/control-plane": ""}, nodedrain.RequesterDeviceOp, 10},
		{"requester without priority", map[string]string{"node-role.kubernetes.io/control-plane": ""}, nodedrain.RequesterNone, 0},
		{"negative requester priority", map[string]string{"node-role.kubernetes.io/control-plane": ""}, nodedrain.RequesterUpdate, -2},
		{"first matching selector wins, not the largest sum", map[string]string{"tier": "edge"}, nodedrain.RequesterDeviceOp, 15},
		{"earlier entry first", map[string]string{"tier": "edge", "critical": "yes"}, nodedrain.RequesterUpdate, 98},
		{"last entry as catch-all", map[string]string{"tier": "core"}, nodedrain.RequesterDeviceOp, 11},
		{"nil labels", nil, nodedrain.RequesterNone, 1},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, o.Priority(tc.labels, tc.r)) })
	}
	assert.Zero(t, Order{}.Priority(map[string]string{"tier": "edge"}, nodedrain.RequesterDeviceOp), "the zero Order ranks every node 0")
}

func TestOrderDomain(t *testing.T) {
	zone := "topology.kubernetes.io/zone"
	for _, tc := range []struct {
		name   string
		o      Order
		labels map[string]string
		want   string
	}{
		{"off", Order{}, map[string]string{zone: "a"}, ""},
		{"label present", Order{FailureDomainLabel: zone}, map[string]string{zone: "a"}, "a"},
		{"label absent", Order{FailureDomainLabel: zone}, map[string]string{"other": "a"}, ""},
		{"nil labels", Order{FailureDomainLabel: zone}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, tc.o.Domain(tc.labels)) })
	}
}

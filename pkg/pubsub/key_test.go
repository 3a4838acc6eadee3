package pubsub_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

func TestValidKey(t *testing.T) {
	tests := []struct {
		name string
		key  string
		ok   bool
	}{
		{"simple node name", "node-1", true},
		{"node name with dots", "edge-1.shop.example.com", true},
		{"numeric", "10.0.0.7", true},
		{"longest DNS-1123 subdomain", strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61), true},
		{"other allowed characters", "A_b=c/d", true},
		{"empty", "", false},
		{"leading dot", ".node", false},
		{"trailing dot", "node.", false},
		{"empty token", "a..b", false},
		{"space", "node 1", false},
		{"wildcard", "node.*", false},
		{"full wildcard", "node.>", false},
		{"non-ASCII", "nöde", false},
		{"colon", "node:1", false},
		{"too long", strings.Repeat("a", pubsub.MaxKeyLength+1), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := pubsub.ValidKey(tt.key)
			if tt.ok {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.True(t, errors.Is(err, pubsub.ErrInvalidKey), "%v", err)
			if len(tt.key) < 100 {
				require.Contains(t, err.Error(), tt.key)
			}
		})
	}
}

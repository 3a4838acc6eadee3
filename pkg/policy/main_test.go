package policy

import (
	"testing"

	"github.com/edgedrain/edgedrain/internal/testenv"
)

// cluster is the package's local control plane (nil under -short).
var cluster *testenv.Cluster

func TestMain(m *testing.M) { testenv.Main(m, &cluster) }

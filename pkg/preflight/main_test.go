package preflight

import (
	"testing"

	"github.com/edgedrain/edgedrain/internal/testenv"
)

var cluster *testenv.Cluster

func TestMain(m *testing.M) { testenv.Main(m, &cluster) }

package busauth_test

import (
	"testing"

	"github.com/edgedrain/edgedrain/internal/testenv"
)

var (
	cluster       *testenv.Cluster
	natsServerBin string // nats-server built from its Go module, for the external-server tests
)

func TestMain(m *testing.M) {
	testenv.MainWithBinary(m, &cluster, "github.com/nats-io/nats-server/v2", &natsServerBin)
}

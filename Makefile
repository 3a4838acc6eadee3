# edgedrain — see README.md. Every target runs on a fresh machine with Go installed; the local
# cluster's binaries (and helm) are built on first use into ~/.cache/edgedrain, outside the checkout, and reused afterwards
# (the first build: 15–40 minutes on 2 cores). make test also needs some Debian packages: it installs them first
# (hack/deps.sh; `make deps` alone), or, not run as root, stops at once naming the command that does.
# make docs regenerates the generated documentation (hack/gendocs.sh).

GO        ?= go
# Use the Go on the machine; go.mod asks for nothing newer.
export GOTOOLCHAIN ?= local
PKGS      := ./...
# An execution count, not a duration: a duration races the fuzzing coordinator's deadline in Go
# before 1.27 (golang/go#75804: a spurious "context deadline exceeded" with no failing input).
FUZZTIME  ?= 30000x
TESTFLAGS ?=

.PHONY: all build image demo test test-short fuzz lint sim chaos cluster-bins cluster-up cluster-down bench docs deps clean

all: build

build:
	$(GO) build -o bin/ ./cmd/...
	cp bin/edgedrainctl bin/kubectl-edgedrain
	cp bin/edgedrainctl bin/kubectl_complete-edgedrain

## image: the container image, without a container runtime or base image: static binaries for
## IMAGE_PLATFORMS (default linux/amd64,linux/arm64) assembled with go-containerregistry into an
## OCI layout (bin/image) and an oci-archive (bin/edgedrain-image.tar); reproducible per commit.
image:
	bash hack/image.sh

## demo: the whole job on a local cluster: a node's reboot drained to COMPLETE, volume data kept
## safe, the node uncordoned when back. The first run builds the cluster binaries once (15–40
## minutes on 2 cores; limit EDGEDRAIN_BUILD_TIMEOUT, default 90m) before the demo's own clock
## starts (EDGEDRAIN_DEMO_TIMEOUT, default 30m).
demo:
	$(GO) run ./hack/demo

## test: everything — lint, unit tests, the cluster tests on a real local control plane, and a
## short run of every fuzzer. First the Debian packages the tests need (deps), then the cluster
## binaries (the first run builds them: 15–40 minutes on 2 cores).
test: deps
	@$(MAKE) --no-print-directory lint cluster-bins
	$(GO) test -count=1 -timeout 45m $(TESTFLAGS) $(PKGS)
	$(MAKE) fuzz

## sim: the whole-protocol simulation (DESIGN §8) for SEEDS seeds from BASE; a violation prints
## the seed and a shrunk story. make test runs 1500 seeds plus 3 random ones.
SEEDS ?= 10000
BASE  ?= 1
sim:
	$(GO) test -count=1 -timeout 0 -run '^TestSimulation$$' -v ./internal/sim -sim.seeds $(SEEDS) -sim.base $(BASE) -sim.random 0

## chaos: the real programs (two coordinators, an agent per kwok node, a three-server NATS
## cluster, the local control plane) under random real faults for DURATION, drawn from SEED
## (empty: a random one, printed), then judged from what they did (internal/chaos). make test
## runs a short one. The run's logs and history are kept when it fails (KEEP=1: always);
## DEBUG=1 has the coordinators log at debug level (the volume gate's every finding).
DURATION ?= 30m
SEED     ?= 0
KEEP     ?= 0
DEBUG    ?= 0
chaos: cluster-bins
	$(GO) test -count=1 -timeout 0 -run '^TestChaos$$' -v ./internal/chaos -chaos.duration $(DURATION) -chaos.seed $(SEED) $(if $(filter 1,$(KEEP)),-chaos.keep) $(if $(filter 1,$(DEBUG)),-chaos.debug)

## test-short: the quick loop, no control plane.
test-short:
	$(GO) test -short -count=1 $(TESTFLAGS) $(PKGS)

## fuzz: run each decoder fuzzer for FUZZTIME (go test -fuzz takes one target at a time).
fuzz:
	@for f in $$($(GO) test -list '^Fuzz' ./pkg/nodedrain | grep '^Fuzz'); do \
		echo "fuzz $$f for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 3s ./pkg/nodedrain || exit 1; \
	done

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.cache/*')); \
		if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	cd hack/tools/image && $(GO) vet ./...

## deps: install the Debian packages the tests need when missing (hack/deps.sh: as root; otherwise
## it names what is missing and the command to run). Quick and silent when all are there.
deps:
	@bash hack/deps.sh

## docs: regenerate the generated documentation (hack/gendocs.sh).
docs:
	bash hack/gendocs.sh

## cluster-bins: build (first use) or find the local cluster's pinned binaries, the real nodes'
## (kubelet, kube-proxy, CoreDNS) too.
cluster-bins:
	@bash hack/cluster-bins.sh --real-node >/dev/null

## cluster-up / cluster-down: a local cluster with 3 simulated nodes for people to poke at.
cluster-up: cluster-bins
	$(GO) run ./hack/localcluster up

cluster-down:
	$(GO) run ./hack/localcluster down

## bench: bus latency and fan-out, volume gate evaluation, agent COMPLETE-to-command latency,
## admission pass, rolling maintenance, fleet scale (100 and 1000 nodes);
## drain times against kubectl drain: `go run ./bench/drain` (several minutes at 1000 pods).
bench:
	$(GO) test -short -run '^$$' -bench . -benchtime 200x ./pkg/pubsub
	$(GO) test -short -run '^$$' -bench . ./pkg/volumes
	$(GO) test -run '^$$' -bench SafeToComplete -benchtime 10x ./pkg/volumes
	$(GO) test -short -run '^$$' -bench . -benchtime 50x ./cmd/agent
	$(GO) test -run '^$$' -bench . -benchtime 200x ./pkg/busauth
	$(GO) test -short -run '^$$' -bench 'Admit|SignStatus|VerifyStatus' ./pkg/nodedrain ./pkg/nodedrain/coordinator
	$(GO) run ./bench/rolling
	$(GO) run ./bench/scale

clean:
	rm -rf bin

package agent

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// Defaults of Config.
const (
	// DefaultRebootCommand reboots a systemd host through logind on its system D-Bus.
	DefaultRebootCommand = LogindReboot
	// DefaultShutdownCommand powers a systemd host off through logind on its system D-Bus.
	DefaultShutdownCommand = LogindPowerOff
	// DefaultStateDir holds the state file; on Kubernetes it is a hostPath so that it survives
	// the agent's pod.
	DefaultStateDir = "/var/lib/edgedrain/agent"
	// DefaultBootIDFile is the kernel's boot ID, new at every boot.
	DefaultBootIDFile = "/proc/sys/kernel/random/boot_id"
	// DefaultBootTimeFile holds the kernel's boot time (its "btime" line).
	DefaultBootTimeFile = "/proc/stat"
	// DefaultSocket is the local socket of `agent request` and `agent status`.
	DefaultSocket = "/run/edgedrain/agent.sock"
	// DefaultOutcomeFile records the last shell command that succeeded. It is in memory (a
	// tmpfs; on Kubernetes the pod's memory emptyDir, which outlives the agent's container):
	// it must survive an agent restart, not a reboot, and be written when the state file's
	// disk refuses writes.
	DefaultOutcomeFile = "/run/edgedrain/command-succeeded"
)

// maxSocketPath is the longest unix socket path Linux accepts (sun_path holds 108 bytes).
const maxSocketPath = 107

// Config configures an Agent. DefaultConfig fills everything but Node and JetStream.
type Config struct {
	// Node is this node's name, the key of its request and status on the bus. Required.
	Node string
	// JetStream is the bus. Required.
	JetStream jetstream.JetStream
	// TrustedKeys returns the public keys whose signatures make a status one the agent takes
	// (DESIGN §10); it may return a different set over time (a rotation). Required.
	TrustedKeys func() nodedrain.KeySet
	// Commands holds the command of each operation: LogindReboot or LogindPowerOff, or a shell
	// command (run with /bin/sh -c); an operation without one is refused (by default OpUpdate
	// and OpDecommission have none).
	Commands map[Operation]string
	// SystemBus is the address of the host's system D-Bus, where the logind commands
	// (LogindReboot, LogindPowerOff) reach systemd-logind. Default: SystemBusAddress().
	SystemBus string
	// CatchShutdown says whether the agent holds logind inhibitor locks on shutdown on SystemBus
	// (inhibit.go): a reboot typed on the node is then held back until it is drained. "" or
	// CatchOff: not.
	CatchShutdown CatchMode
	// InhibitDelayMax is how long logind may hold such a shutdown back: if logind's
	// InhibitDelayMaxSec is shorter, the agent raises it with a drop-in in LogindConfDir while it
	// runs. Zero: logind's setting as it is.
	InhibitDelayMax time.Duration
	LogindConfDir   string
	// Sentinels holds the sentinel file of each operation whose presence asks for it; "" or
	// absent: none.
	Sentinels map[Operation]string
	// SentinelInterval is how often sentinel files are checked (> 0); each check waits a random
	// extra of up to SentinelJitter (≥ 0), and the first one only that extra.
	SentinelInterval, SentinelJitter time.Duration
	// StateDir holds the state file. Required.
	StateDir string
	// BootIDFile holds the node's boot ID. Required.
	BootIDFile string
	// BootTimeFile holds the node's boot time ("btime" line of /proc/stat). Without a state
	// file, the agent withdraws a request made before that time (left by an earlier agent);
	// "" or unreadable: it withdraws none it did not make.
	BootTimeFile string
	// OverrideFile is the forced-status file; "" disables it. It is checked every OverridePoll
	// (> 0, at most 1 s so that an override acts within a second).
	OverrideFile string
	OverridePoll time.Duration
	// Socket is the unix socket local requests come in on; "" disables it.
	Socket string
	// OutcomeFile is where a shell command's own shell records its success (runCommand), for an
	// agent restarted before it could record it; "" disables it.
	OutcomeFile string
	// CommandTimeout bounds one run of an operation command; zero: no limit.
	CommandTimeout time.Duration
	// Limits holds the retry delays.
	Limits Limits
	// APIProbe asks whether the Kubernetes API answers from this node, before the agent acts on
	// a COMPLETE of the API-unreachable rule (apiprobe.go); nil: no probe, such a COMPLETE is
	// taken as it is.
	APIProbe APIProbe
	// Metrics receives the agent's metrics; nil: NewMetrics(nil) (not exported).
	Metrics *Metrics
	// Logger receives structured logs (fields node, status, request); nil discards them.
	Logger logrus.FieldLogger
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// DefaultConfig returns the defaults: reboot and shutdown through systemd-logind on the system
// D-Bus, no update or decommission command, the reboot sentinel /var/run/reboot-required checked every minute (plus
// up to 30 s of jitter), the override file of DESIGN §4 polled every 250 ms, and DefaultLimits.
func DefaultConfig() Config {
	return Config{
		Commands:         map[Operation]string{OpReboot: DefaultRebootCommand, OpShutdown: DefaultShutdownCommand},
		Sentinels:        map[Operation]string{OpReboot: DefaultRebootSentinel},
		SentinelInterval: time.Minute,
		SentinelJitter:   30 * time.Second,
		StateDir:         DefaultStateDir,
		BootIDFile:       DefaultBootIDFile,
		BootTimeFile:     DefaultBootTimeFile,
		OverrideFile:     DefaultOverrideFile,
		OverridePoll:     250 * time.Millisecond,
		Socket:           DefaultSocket,
		OutcomeFile:      DefaultOutcomeFile,
		SystemBus:        SystemBusAddress(),
		CatchShutdown:    CatchOff,
		LogindConfDir:    DefaultLogindConfDir,
		CommandTimeout:   time.Hour,
		Limits:           DefaultLimits(),
	}
}

// Validate reports every problem with c, as one error matching ErrInvalidConfig.
func (c Config) Validate() error {
	var errs []error
	if c.JetStream == nil {
		errs = append(errs, errors.New("a JetStream context is required"))
	}
	if c.TrustedKeys == nil {
		errs = append(errs, errors.New("trusted keys are required: the agent takes only statuses signed by the coordinator"))
	}
	return joinConfig(append(errs, c.ValidateSettings())...)
}

// ValidateSettings checks everything but the bus (what flags set).
func (c Config) ValidateSettings() error {
	var errs []error
	if err := nodedrain.ValidNodeName(c.Node); err != nil {
		errs = append(errs, fmt.Errorf("node name: %w", err))
	} else if err := pubsub.ValidKey(c.Node); err != nil {
		errs = append(errs, fmt.Errorf("node name: %w", err))
	}
	for op, command := range c.Commands {
		if !op.Valid() {
			errs = append(errs, fmt.Errorf("command for %w %q", ErrUnknownOperation, op))
		}
		if IsLogindCommand(command) {
			if err := validLogindCommand(command); err != nil {
				errs = append(errs, fmt.Errorf("%s %w", op, err))
			} else if c.SystemBus == "" {
				errs = append(errs, fmt.Errorf("%s command %s: the system bus address is empty", op, command))
			} else if op.Valid() && !op.goesDown(c.Limits) {
				// The agent would count the operation over when logind answers and withdraw
				// its request: the node uncordoned while it goes down.
				errs = append(errs, fmt.Errorf("%s command %s takes the node down, but %s is over when its command returns (%s)",
					op, command, op.withArticle(), logindMisfit(op)))
			}
		}
	}
	for op, path := range c.Sentinels {
		switch {
		case !op.Valid():
			errs = append(errs, fmt.Errorf("sentinel for %w %q", ErrUnknownOperation, op))
		case path != "" && c.Commands[op] == "":
			errs = append(errs, fmt.Errorf("%s sentinel %s is set but no %s command is", op, path, op))
		}
	}
	if c.SentinelInterval <= 0 || c.SentinelJitter < 0 {
		errs = append(errs, fmt.Errorf("sentinel interval (%s) must be positive and its jitter (%s) not negative",
			c.SentinelInterval, c.SentinelJitter))
	}
	if c.StateDir == "" {
		errs = append(errs, errors.New("a state directory is required"))
	}
	if c.BootIDFile == "" {
		errs = append(errs, errors.New("a boot ID file is required"))
	}
	if c.OverrideFile != "" && (c.OverridePoll <= 0 || c.OverridePoll > time.Second) {
		errs = append(errs, fmt.Errorf("override poll interval %s: want more than 0 and at most 1s", c.OverridePoll))
	}
	if len(c.Socket) > maxSocketPath {
		errs = append(errs, fmt.Errorf("socket path is %d bytes, longer than the %d a unix socket allows", len(c.Socket), maxSocketPath))
	}
	if _, err := ParseCatchMode(string(c.CatchShutdown)); err != nil {
		errs = append(errs, err)
	} else if c.catching() && c.SystemBus == "" {
		errs = append(errs, errors.New("catching shutdowns needs the system bus address"))
	}
	if c.InhibitDelayMax < 0 || c.InhibitDelayMax > MaxInhibitDelay {
		errs = append(errs, fmt.Errorf("inhibit delay max %s: want 0 (logind's own) up to %s", c.InhibitDelayMax, MaxInhibitDelay))
	} else if c.InhibitDelayMax > 0 && c.catching() && c.LogindConfDir == "" {
		errs = append(errs, errors.New("raising logind's InhibitDelayMaxSec needs the directory of its drop-ins"))
	}
	if c.CommandTimeout < 0 {
		errs = append(errs, fmt.Errorf("command timeout must not be negative, got %s", c.CommandTimeout))
	}
	if err := c.Limits.Validate(); err != nil {
		errs = append(errs, err)
	}
	return joinConfig(errs...)
}

// catching reports whether the agent holds logind locks on shutdown.
func (c Config) catching() bool {
	return c.CatchShutdown == CatchDelay || c.CatchShutdown == CatchBlock
}

// joinConfig joins errs into one error matching ErrInvalidConfig, or nil.
func joinConfig(errs ...error) error {
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// logindMisfit says what to use instead of a logind command for op.
func logindMisfit(op Operation) string {
	if op == OpUpdate {
		return "--update-reboots says an update reboots the node"
	}
	return "a decommission needs a shell command that stops the kubelet first"
}

package main

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/edgedrain/edgedrain/internal/cli"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
)

// options are the flags of `agent run`.
type options struct {
	nats      cli.NATSFlags
	cfg       agent.Config
	commands  map[agent.Operation]*string
	sentinels map[agent.Operation]*string
	listen    string
	trusted   string
	apiProbe  string
	busCheck  time.Duration
	logFormat string
	logLevel  string
	catch     string
}

func registerRunFlags(fs *pflag.FlagSet) *options {
	o := &options{cfg: agent.DefaultConfig(), commands: map[agent.Operation]*string{}, sentinels: map[agent.Operation]*string{}}
	c, p := &o.cfg, &o.cfg.Limits
	fs.StringVar(&c.Node, "node-name", os.Getenv("NODE_NAME"), "this node's name (required; on Kubernetes from the downward API, spec.nodeName; NODE_NAME is read too)")
	o.nats.Register(fs)
	fs.StringVar(&o.trusted, "trusted-keys", "", "PEM public keys of the coordinator, a file or a directory of *.pem (required; the ConfigMap edgedrain-trusted-keys, docs/status-signing.md): the agent acts on no status they do not verify; read again when it changes (key rotation)")
	for _, op := range agent.Operations {
		o.commands[op] = fs.String(string(op)+"-command", c.Commands[op], commandHelp(op))
		o.sentinels[op] = fs.String(string(op)+"-sentinel", c.Sentinels[op], fmt.Sprintf(
			"file whose presence asks for the %s (its first line is added to the context); empty: none", op))
	}
	fs.StringVar(&o.apiProbe, "api-probe-url", agent.InClusterAPIURL(), "URL the agent asks (any HTTP answer counts) before it acts on a COMPLETE of the coordinator's API-unreachable rule: if the Kubernetes API answers from this node, the coordinator alone is cut off and the operation does not run undrained (default: the in-cluster API server's /readyz; empty: no probe, such a COMPLETE is taken as it is)")
	fs.StringVar(&c.SystemBus, "system-bus", c.SystemBus, "address of the host's system D-Bus, where the logind: commands reach systemd-logind (the default is DBUS_SYSTEM_BUS_ADDRESS when set)")
	fs.StringVar(&o.catch, "catch-shutdown", string(c.CatchShutdown), "reboots and power-offs started outside edgedrain on this node (an administrator's systemctl reboot, unattended-upgrades,\n"+
		"a power button): off lets them go ahead undrained; delay holds a logind delay lock on shutdown, so logind announces\n"+
		"them and waits (at most its InhibitDelayMaxSec, see --inhibit-delay-max) while the agent asks for the drain, and goes on\n"+
		"at COMPLETE, or at once after a failed drain; block also holds a block lock that refuses the callers logind checks\n"+
		"(non-root users; root too from systemd 257), telling them to use \"agent request reboot\". reboot -f, a panic or a power\n"+
		"cut are never seen. Needs --system-bus")
	fs.DurationVar(&c.InhibitDelayMax, "inhibit-delay-max", 10*time.Minute, "with --catch-shutdown: how long logind may hold a shutdown back for the drain; if its InhibitDelayMaxSec is\n"+
		"shorter, the agent raises it with a drop-in in --logind-conf-dir while it runs (removed when it stops); 0: logind's own.\n"+
		"A drain not done by then: the node goes down undrained (metric edgedrain_agent_caught_shutdowns_total{outcome=\"undrained\"})")
	fs.StringVar(&c.LogindConfDir, "logind-conf-dir", c.LogindConfDir, "the host's logind drop-in directory, where --inhibit-delay-max is written")
	fs.DurationVar(&c.SentinelInterval, "sentinel-interval", c.SentinelInterval, "how often the sentinel files are checked")
	fs.DurationVar(&c.SentinelJitter, "sentinel-jitter", c.SentinelJitter, "random extra wait of up to this much before each sentinel check, so a fleet does not ask at once")
	fs.StringVar(&c.StateDir, "state-dir", c.StateDir, "directory of the state file that keeps a deferred operation across agent restarts (a hostPath)")
	fs.StringVar(&c.BootIDFile, "boot-id-file", c.BootIDFile, "file holding the node's boot ID; a new one means the node rebooted")
	fs.StringVar(&c.BootTimeFile, "boot-time-file", c.BootTimeFile, "file with the node's boot time (btime line); without a state file, a request made before it is withdrawn as stale; empty: none")
	fs.StringVar(&c.OverrideFile, "force-status-file", c.OverrideFile, `forced-status file, e.g. {"Status":9,"RequestedBy":2}: replaces the bus status for this node while present; a COMPLETE is removed once acted on; empty: off`)
	fs.DurationVar(&c.OverridePoll, "force-status-poll", c.OverridePoll, "how often the forced-status file is checked (at most 1s)")
	fs.StringVar(&c.Socket, "socket", c.Socket, "unix socket for \"agent request\" and \"agent status\"; empty: off")
	fs.StringVar(&c.OutcomeFile, "outcome-file", c.OutcomeFile, "file where a shell command's own shell records its success, so that an agent restarted before it could record it (its disk refusing the state file) does not run it again; in memory (a tmpfs, on Kubernetes the pod's memory emptyDir); empty: off")
	fs.DurationVar(&c.CommandTimeout, "command-timeout", c.CommandTimeout, "longest one run of an operation command may take before it is killed and counted as failed (0: no limit; a logind call waits at most 1m)")
	fs.DurationVar(&p.DrainRetryBackoff, "drain-retry-backoff", p.DrainRetryBackoff, "after FAILEDCORDON or FAILEDDRAIN, wait this long before asking again; doubles each time")
	fs.DurationVar(&p.DrainRetryBackoffMax, "drain-retry-backoff-max", p.DrainRetryBackoffMax, "longest wait before asking again after a failed drain")
	fs.DurationVar(&p.CommandRetryBackoff, "command-retry-backoff", p.CommandRetryBackoff, "after a failed command, wait this long before running it again; doubles each time")
	fs.DurationVar(&p.CommandRetryBackoffMax, "command-retry-backoff-max", p.CommandRetryBackoffMax, "longest wait before running a failed command again")
	fs.DurationVar(&p.RebootTimeout, "reboot-timeout", p.RebootTimeout, "after a reboot or shutdown command returned, how long the node has to go down (a new boot ID) before the command counts as failed and runs again")
	fs.BoolVar(&p.UpdateReboots, "update-reboots", false, "the update command reboots the node: an update is over when the node is back (new boot ID), not when its command returns")
	fs.DurationVar(&o.busCheck, "bus-check-interval", cli.DefaultBusCheckInterval, "how often the bus's buckets are asked whether they answer (metric edgedrain_agent_bus_available, /readyz): on a NATS cluster without a quorum of its servers the connection stays up but every write is refused")
	fs.StringVar(&o.listen, "listen", ":9091", "host:port serving /metrics, /healthz and /readyz (empty: off)")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: error, warn, info, debug")
	// Defaults that depend on where the agent runs, as the reference pages show them.
	cli.DocDefault(fs, "node-name", "$NODE_NAME")
	cli.DocDefault(fs, "api-probe-url", "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/readyz in a pod, else empty")
	cli.DocDefault(fs, "system-bus", "${DBUS_SYSTEM_BUS_ADDRESS:-"+agent.DefaultSystemBus+"}")
	cli.BindEnv(fs)
	return o
}

// commandHelp is the help text of op's --OP-command flag.
func commandHelp(op agent.Operation) string {
	const env = "A shell command gets EDGEDRAIN_OPERATION, EDGEDRAIN_CONTEXT, EDGEDRAIN_REQUEST_ID, EDGEDRAIN_NODE and EDGEDRAIN_ATTEMPT"
	if op == agent.OpDecommission {
		return "shell command (/bin/sh -c) that retires this node for good, e.g. \"systemctl stop kubelet && systemctl poweroff\"\n" +
			"(stop the kubelet, or it registers the Node again); empty: decommission refused. It runs once the drain is\n" +
			"COMPLETE saying so: the coordinator has evicted the pods and Longhorn replicas, handled node-local volumes and\n" +
			"deleted the Node object (NOTSUPPORTED, or a COMPLETE that does not say so, does not run it; the override file\n" +
			"forces it). Kubernetes removes the agent's pod about 40 s after its Node is deleted: the command must finish,\n" +
			"or hand the work off (e.g. systemd-run --no-block ...), by then. When it returns success the agent withdraws\n" +
			"its request and the coordinator removes the node's keys from the bus; if it powers the machine off first, the\n" +
			"coordinator removes them after its linger time.\n" + env
	}
	how := "shell command (/bin/sh -c)"
	switch op {
	case agent.OpReboot:
		how = agent.LogindReboot + " (systemd-logind's Reboot over the system D-Bus, as root: no shell, no nsenter, no privileged\n" +
			"container; a call that gets no answer counts as under way, so the node has --reboot-timeout to go down) or a " + how
	case agent.OpShutdown:
		how = agent.LogindPowerOff + " (systemd-logind's PowerOff over the system D-Bus) or a " + how
	}
	return fmt.Sprintf("%s that performs the %s once the drain is COMPLETE; empty: %s not offered.\n%s", how, op, op, env)
}

// validate checks what the flags alone can tell and completes the agent's Config.
func (o *options) validate() error {
	o.cfg.Commands, o.cfg.Sentinels = map[agent.Operation]string{}, map[agent.Operation]string{}
	for op, v := range o.commands {
		if s := strings.TrimSpace(*v); s != "" {
			o.cfg.Commands[op] = s
		}
	}
	for op, v := range o.sentinels {
		if s := strings.TrimSpace(*v); s != "" {
			o.cfg.Sentinels[op] = s
		}
	}
	var errs []error
	if mode, err := agent.ParseCatchMode(o.catch); err != nil {
		errs = append(errs, fmt.Errorf("--catch-shutdown: %w", err))
	} else {
		o.cfg.CatchShutdown = mode
	}
	cfg := o.cfg
	if cfg.Node == "" {
		errs = append(errs, errors.New("--node-name is required (or EDGEDRAIN_NODE_NAME, or NODE_NAME from the downward API)"))
		cfg.Node = "node" // still check everything else
	}
	errs = append(errs, needShell(cfg.Commands))
	if err := cfg.ValidateSettings(); err != nil {
		errs = append(errs, err)
	}
	if err := o.nats.Options("edgedrain-agent").Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.busCheck <= 0 {
		errs = append(errs, fmt.Errorf("--bus-check-interval %s: must be positive", o.busCheck))
	}
	if o.listen != "" {
		if _, _, err := cli.SplitHostPort(o.listen); err != nil {
			errs = append(errs, fmt.Errorf("--listen %q: %w", o.listen, err))
		}
	}
	if o.apiProbe != "" {
		if u, err := url.Parse(o.apiProbe); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("--api-probe-url %q: want an http(s) URL, e.g. https://10.96.0.1:443/readyz", o.apiProbe))
		} else {
			o.cfg.APIProbe = agent.HTTPAPIProbe(o.apiProbe)
		}
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		errs = append(errs, fmt.Errorf("--log-format %q: want text or json", o.logFormat))
	}
	return errors.Join(errs...)
}

// shell is agent.Shell; a var so that a test can name one that is absent.
var shell = agent.Shell

// needShell refuses shell commands where there is no shell, e.g. in edgedrain's own image,
// which has none: there the logind commands are the way.
func needShell(commands map[agent.Operation]string) error {
	var errs []error
	for _, op := range agent.Operations {
		command := commands[op]
		if command == "" || agent.IsLogindCommand(command) {
			continue
		}
		if _, err := os.Stat(shell); err != nil {
			errs = append(errs, fmt.Errorf("--%s-command %q needs %s, which is missing here (%v); in edgedrain's image use %s or %s",
				op, command, shell, err, agent.LogindReboot, agent.LogindPowerOff))
		}
	}
	return errors.Join(errs...)
}

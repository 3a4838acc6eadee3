package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"
)

// Operation commands that are not shell commands: the agent asks systemd-logind, over the
// host's system D-Bus, to reboot or power the machine off (login1.Manager's Reboot and PowerOff,
// not interactive). This needs neither a shell nor nsenter nor a privileged container: only the
// bus's socket and root's identity on it (logind and polkit let root do this).
const (
	LogindReboot   = "logind:reboot"
	LogindPowerOff = "logind:poweroff"
)

const logindPrefix = "logind:"

// DefaultSystemBus is the system bus's address when DBUS_SYSTEM_BUS_ADDRESS is not set.
const DefaultSystemBus = "unix:path=/run/dbus/system_bus_socket"

// logindMethods maps each logind command to its login1.Manager method.
var logindMethods = map[string]string{LogindReboot: "Reboot", LogindPowerOff: "PowerOff"}

const (
	logindName = "org.freedesktop.login1"
	logindPath = dbus.ObjectPath("/org/freedesktop/login1")
)

// IsLogindCommand reports whether command is one of the logind commands rather than a shell
// command.
func IsLogindCommand(command string) bool { return strings.HasPrefix(command, logindPrefix) }

// validLogindCommand checks a command that names logind.
func validLogindCommand(command string) error {
	if _, ok := logindMethods[command]; !ok {
		return fmt.Errorf("command %q: the logind commands are %s and %s", command, LogindReboot, LogindPowerOff)
	}
	return nil
}

// SystemBusAddress is the system bus's address: DBUS_SYSTEM_BUS_ADDRESS, else DefaultSystemBus.
func SystemBusAddress() string {
	if a := os.Getenv("DBUS_SYSTEM_BUS_ADDRESS"); a != "" {
		return a
	}
	return DefaultSystemBus
}

// runLogind asks logind at the system bus address to carry out command. logind answers once
// systemd has queued the reboot or power-off; the machine goes down after that, as with
// `systemctl reboot`.
func runLogind(ctx context.Context, address, command string) error {
	method, ok := logindMethods[command]
	if !ok {
		return validLogindCommand(command)
	}
	conn, err := dbus.Connect(address, dbus.WithContext(ctx))
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: the system D-Bus at %s did not let the agent in: %w", command, address, ctx.Err())
		}
		return fmt.Errorf("%s: cannot reach the system D-Bus at %s (mount the host's /run/dbus and run the agent as root): %w", command, address, err)
	}
	defer conn.Close()
	call := conn.Object(logindName, logindPath).CallWithContext(ctx, logindName+".Manager."+method, 0, false)
	if call.Err == nil {
		return nil
	}
	var derr dbus.Error
	isReply := errors.As(call.Err, &derr)
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w: %w", command, errNoAnswer, ctx.Err())
	case !isReply || derr.Name == noReply:
		return fmt.Errorf("%s: %w: %w", command, errNoAnswer, call.Err)
	case derr.Name == "org.freedesktop.login1.OperationInProgress":
		return fmt.Errorf("%s: %w: %w", command, errInProgress, call.Err)
	case derr.Name == "org.freedesktop.DBus.Error.ServiceUnknown":
		return fmt.Errorf("%s: systemd-logind is not on the system bus at %s (is the host running systemd?): %w", command, address, call.Err)
	case derr.Name == "org.freedesktop.DBus.Error.AccessDenied" || derr.Name == "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired":
		return fmt.Errorf("%s: refused by logind and polkit (run the agent as root, or as the user of the polkit rule in deploy/host installed on the host; and no AppArmor or SELinux policy may stop it): %w", command, call.Err)
	default:
		return fmt.Errorf("%s: logind: %w", command, call.Err)
	}
}

// errNoAnswer marks a call that got no answer: the time ran out or the connection closed
// (before or after the call went out). logind may well have queued the job: the bus goes away
// as the host shuts down.
var errNoAnswer = errors.New("no answer from logind (the call may have gone out)")

// errInProgress is logind's answer that a shutdown or reboot is already under way (a slow one
// of ours, or someone else's): the node is going down.
var errInProgress = errors.New("logind says a shutdown is already under way")

// noReply is the bus's own error for a call that got no reply: dbus-daemon's reply timeout, or
// logind leaving the bus before it answered.
const noReply = "org.freedesktop.DBus.Error.NoReply"

// LogindAvailable checks, within timeout, that logind owns its name on the bus at address; the
// agent warns at start when it does not, instead of learning it at the first reboot.
func LogindAvailable(address string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := dbus.Connect(address, dbus.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("cannot reach the system D-Bus at %s: %w", address, err)
	}
	defer conn.Close()
	var has bool
	if err := conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.NameHasOwner", 0, logindName).Store(&has); err != nil {
		return fmt.Errorf("asking the system D-Bus at %s for logind: %w", address, err)
	}
	if !has {
		return fmt.Errorf("systemd-logind (%s) is not on the system D-Bus at %s", logindName, address)
	}
	return nil
}

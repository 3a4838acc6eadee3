// Package cli holds what the edgedrain programs need for their command lines: cobra commands
// whose flags can also be set through EDGEDRAIN_* environment variables, help that names those
// variables, and the Go-style single-dash flags (-nats-url) the programs accepted before they
// moved to pflag.
package cli

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// EnvPrefix starts the name of every environment variable that sets a flag.
const EnvPrefix = "EDGEDRAIN_"

// EnvAnnotation is the pflag annotation naming the environment variable that sets a flag (see
// BindEnv); a flag without it has none.
const EnvAnnotation = "edgedrain.io/env"

// EnvName returns the environment variable for flag name: "nats-url" → "EDGEDRAIN_NATS_URL".
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// BindEnv lets every flag now in fs be set by its environment variable (EnvName), recording the
// variable in the flag's EnvAnnotation; ApplyEnv reads them.
func BindEnv(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Annotations == nil {
			f.Annotations = map[string][]string{}
		}
		f.Annotations[EnvAnnotation] = []string{EnvName(f.Name)}
	})
}

// Env returns the environment variable that sets f, "" if none.
func Env(f *pflag.Flag) string {
	if v := f.Annotations[EnvAnnotation]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// ApplyEnv sets every flag of fs that has an environment variable (BindEnv) and was not given
// on the command line from that variable, if it is set: the command line wins over the
// environment, which wins over the default. A bad value names its variable.
func ApplyEnv(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		env := Env(f)
		if err != nil || f.Changed || env == "" {
			return
		}
		if v, ok := os.LookupEnv(env); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("environment variable %s=%q: %w", env, v, e)
			}
		}
	})
	return err
}

// Parse parses args into fs (Go-style single-dash long flags accepted, see GoStyleArgs), then
// sets what the command line left unset from the environment (ApplyEnv).
func Parse(fs *pflag.FlagSet, args []string) error {
	if err := fs.Parse(goStyle(flagTable(fs), fs.GetNormalizeFunc(), args)); err != nil {
		return err
	}
	return ApplyEnv(fs)
}

// GoValue adapts a flag.Value (a type of a package that knows nothing of pflag) to pflag, its
// type named typ in the help.
func GoValue(v flag.Value, typ string) pflag.Value { return goValue{v, typ} }

type goValue struct {
	flag.Value
	typ string
}

func (v goValue) Type() string { return v.typ }

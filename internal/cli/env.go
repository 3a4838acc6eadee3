// Package cli holds what both edgedrain binaries need for their command lines: flags that can also
// be set through EDGEDRAIN_* environment variables, and help that names those variables.
package cli

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// EnvPrefix starts the name of every environment variable that sets a flag.
const EnvPrefix = "EDGEDRAIN_"

// EnvName returns the environment variable for flag name: "nats-url" → "EDGEDRAIN_NATS_URL".
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse parses args into fs, then sets every flag not given on the command line from its
// environment variable (see EnvName), if that is set. A bad value names its variable.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] {
			return
		}
		env := EnvName(f.Name)
		if v, ok := os.LookupEnv(env); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("environment variable %s=%q: %w", env, v, e)
			}
		}
	})
	return err
}

// Usage returns a flag.FlagSet Usage function that prints intro, then every flag with its default
// and its environment variable.
func Usage(fs *flag.FlagSet, intro string) func() {
	return func() {
		out := fs.Output()
		fmt.Fprintln(out, strings.TrimSpace(intro))
		fmt.Fprintln(out, "\nFlags (each can also be set by the environment variable shown):")
		fs.VisitAll(func(f *flag.Flag) {
			name, usage := flag.UnquoteUsage(f)
			fmt.Fprintf(out, "  --%s", f.Name)
			if name != "" {
				fmt.Fprintf(out, " %s", name)
			}
			fmt.Fprintf(out, "   [%s]\n      %s", EnvName(f.Name), strings.ReplaceAll(usage, "\n", "\n      "))
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
				fmt.Fprintf(out, " (default %q)", f.DefValue)
			}
			fmt.Fprintln(out)
		})
	}
}

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Annotations of flags, read by Help and by the reference pages (docs/reference).
const (
	// GroupAnnotation puts a flag in a section of its own in the help, titled by its value
	// (see Group); flags without it are listed under "Flags:".
	GroupAnnotation = "edgedrain.io/group"
	// DocDefaultAnnotation replaces a flag's default in the reference pages, for a default that
	// depends on the machine (a host name, an environment variable): see DocDefault.
	DocDefaultAnnotation = "edgedrain.io/doc-default"
)

// Group puts every flag now in fs in the help section titled title.
func Group(fs *pflag.FlagSet, title string) {
	fs.VisitAll(func(f *pflag.Flag) { annotate(f, GroupAnnotation, title) })
}

// DocDefault has the reference pages show placeholder as the default of flag name of fs (its
// real default depends on where the program runs); it panics if fs has no such flag.
func DocDefault(fs *pflag.FlagSet, name, placeholder string) {
	f := fs.Lookup(name)
	if f == nil {
		panic("cli.DocDefault: no flag --" + name)
	}
	annotate(f, DocDefaultAnnotation, placeholder)
}

func annotate(f *pflag.Flag, key, value string) {
	if f.Annotations == nil {
		f.Annotations = map[string][]string{}
	}
	f.Annotations[key] = []string{value}
}

// ExitError is an error that ends the program with exit status Code; a nil Err ends it without
// a message (what there was to say has been said).
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// Exit returns err as an ExitError with code (err may be nil: exit without a message).
func Exit(code int, err error) error { return &ExitError{Code: code, Err: err} }

// ExitCode returns the exit status err asks for: 0 for nil, an ExitError's code, else
// otherwise.
func ExitCode(err error, otherwise int) int {
	var e *ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return e.Code
	}
	return otherwise
}

// Message returns what to print for err ("" for an ExitError without an error).
func Message(err error) string {
	var e *ExitError
	if err == nil || (errors.As(err, &e) && e.Err == nil) {
		return ""
	}
	return err.Error()
}

// NormalizeFunc is the programs' flag name normalization: "_" is read as "-" (as kubectl reads
// it), and each alias as the flag it names (e.g. "o" → "output": Go's flag package took --o).
func NormalizeFunc(aliases map[string]string) func(*pflag.FlagSet, string) pflag.NormalizedName {
	return func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		name = strings.ReplaceAll(name, "_", "-")
		if a, ok := aliases[name]; ok {
			name = a
		}
		return pflag.NormalizedName(name)
	}
}

// flags says which flags exist and whether each takes a value (the next argument, when not
// given as --name=value): long names (normalized) and shorthand letters.
type flags struct {
	long  map[string]bool
	short map[byte]bool
}

func flagTable(sets ...*pflag.FlagSet) flags {
	t := flags{long: map[string]bool{"help": false}, short: map[byte]bool{'h': false}}
	for _, fs := range sets {
		fs.VisitAll(func(f *pflag.Flag) {
			takes := f.NoOptDefVal == ""
			t.long[f.Name] = takes
			if f.Shorthand != "" {
				t.short[f.Shorthand[0]] = takes
			}
		})
	}
	return t
}

// GoStyleArgs rewrites the single-dash long flags that Go's flag package accepted and pflag does
// not (-nats-url URL, -watch, -o=json stays) into pflag's double-dash form, for every long flag
// that root or any command under it defines: users, scripts and manifests written for the
// programs before they moved to pflag keep working. Shorthands (-o json, -n NS, -h), the values
// of flags that take one, and everything after "--" are left alone; an unknown single-dash word
// is too (pflag then reports it). For cobra's completion requests (__complete ARGS... WORD), the
// word being completed is left as typed.
func GoStyleArgs(root *cobra.Command, args []string) []string {
	var sets []*pflag.FlagSet
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		sets = append(sets, c.Flags(), c.PersistentFlags())
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	t, norm := flagTable(sets...), root.GlobalNormalizationFunc()
	if len(args) > 0 && (args[0] == cobra.ShellCompRequestCmd || args[0] == cobra.ShellCompNoDescRequestCmd) {
		last := len(args) - 1
		if last < 1 {
			return args
		}
		out := append([]string{args[0]}, goStyle(t, norm, args[1:last])...)
		return append(out, args[last])
	}
	return goStyle(t, norm, args)
}

func goStyle(t flags, norm func(*pflag.FlagSet, string) pflag.NormalizedName, args []string) []string {
	normal := func(name string) string {
		if norm == nil {
			return name
		}
		return string(norm(nil, name))
	}
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		takesValue := false
		switch {
		case len(a) < 2 || a[0] != '-':
		case a[1] == '-':
			name, _, inline := strings.Cut(a[2:], "=")
			takesValue = t.long[normal(name)] && !inline
		default:
			name, _, inline := strings.Cut(a[1:], "=")
			if takes, ok := t.long[normal(name)]; ok && len(name) > 1 {
				a, takesValue = "-"+a, takes && !inline
			} else if len(a) == 2 {
				takesValue = t.short[a[1]]
			}
		}
		out = append(out, a)
		if takesValue && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
}

// Help is the programs' help function (cobra's SetHelpFunc): the command's Long text, which
// starts with its usage lines, then its flags, each with its type, its default and the
// environment variable that sets it, if any. Like Go's flag package before, it writes to the
// error stream.
func Help(cmd *cobra.Command, _ []string) {
	w := cmd.ErrOrStderr()
	fmt.Fprintln(w, strings.TrimRight(cmd.Long, "\n"))
	WriteFlags(w, cmd)
}

// WriteFlags writes cmd's own flags, by section (GroupAnnotation), then the names of the flags
// it inherits from the commands above it.
func WriteFlags(w io.Writer, cmd *cobra.Command) {
	var titles []string
	sections := map[string][]*pflag.Flag{}
	withEnv := false
	cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Name == "help" {
			return
		}
		title := "Flags:"
		if g := f.Annotations[GroupAnnotation]; len(g) > 0 {
			title = g[0]
		}
		if _, ok := sections[title]; !ok {
			titles = append(titles, title)
		}
		sections[title] = append(sections[title], f)
		withEnv = withEnv || Env(f) != ""
	})
	// "Flags:" first, the groups in the order of their first flag.
	for i, t := range titles {
		if t == "Flags:" {
			copy(titles[1:i+1], titles[:i])
			titles[0] = t
		}
	}
	for _, title := range titles {
		fmt.Fprintf(w, "\n%s\n", title)
		for _, f := range sections[title] {
			writeFlag(w, f)
		}
	}
	if withEnv {
		fmt.Fprintln(w, "\nA flag not given on the command line is taken from the environment variable shown in brackets, if that is set.")
	}
	var inherited []string
	cmd.InheritedFlags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && f.Name != "help" {
			inherited = append(inherited, "--"+f.Name)
		}
	})
	if len(inherited) > 0 {
		fmt.Fprintf(w, "\nGlobal flags (see %s --help):\n", cmd.Root().DisplayName())
		line := " "
		for _, name := range inherited {
			if len(line)+len(name) > 98 {
				fmt.Fprintln(w, strings.TrimSuffix(line, ","))
				line = " "
			}
			line += " " + name + ","
		}
		fmt.Fprintln(w, strings.TrimSuffix(line, ","))
	}
}

func writeFlag(w io.Writer, f *pflag.Flag) {
	typ, usage := pflag.UnquoteUsage(f)
	fmt.Fprint(w, "  ")
	if f.Shorthand != "" {
		fmt.Fprintf(w, "-%s, ", f.Shorthand)
	}
	fmt.Fprintf(w, "--%s", f.Name)
	if typ != "" {
		fmt.Fprintf(w, " %s", typ)
	}
	if env := Env(f); env != "" {
		fmt.Fprintf(w, "   [%s]", env)
	}
	fmt.Fprintf(w, "\n      %s", strings.ReplaceAll(usage, "\n", "\n      "))
	if ShowDefault(f.DefValue) {
		fmt.Fprintf(w, " (default %q)", f.DefValue)
	}
	fmt.Fprintln(w)
}

// ShowDefault says whether a default is worth showing: not the zero value of its type.
func ShowDefault(def string) bool {
	switch def {
	case "", "false", "0", "[]":
		return false
	}
	return true
}

// Setup makes root (and every command under it) an edgedrain program: the help of Help, flag
// names normalized by NormalizeFunc(aliases), and no printing by cobra itself: Execute's caller
// prints the error, and flag errors end the program with exit status 2 (a usage error) unless a
// command sets its own FlagErrorFunc.
func Setup(root *cobra.Command, aliases map[string]string) {
	root.SilenceErrors, root.SilenceUsage = true, true
	root.SetHelpFunc(Help)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return Exit(2, err) })
	root.SetGlobalNormalizationFunc(NormalizeFunc(aliases))
}

// Execute runs root with args (made pflag's with GoStyleArgs) and ctx, its output to stdout and
// stderr, and returns the command that ran and its error.
func Execute(ctx context.Context, root *cobra.Command, args []string, stdout, stderr io.Writer) (*cobra.Command, error) {
	root.SetOut(stdout) // (before the completion command is made: it keeps the writer it finds)
	root.SetErr(stderr)
	// cobra adds its completion and help commands when it executes: add them now, so that their
	// flags (-no-descriptions) are known to GoStyleArgs too.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd(args...)
	root.SetArgs(append([]string{}, GoStyleArgs(root, args)...))
	return root.ExecuteContextC(ctx)
}

// Package refpages generates the reference pages in docs/reference from the code: a page per
// command of each program (cobra's Markdown generator, every flag with its default and its
// environment variable), every metric the programs serve (gathered from Prometheus registries)
// and the numbers on the wire. The tests named TestReferencePages (in cmd/coordinator, cmd/agent,
// cmd/edgedrainctl and this package) compare the pages with what the code generates and fail when
// they differ; run with EDGEDRAIN_UPDATE_REFERENCE=1 (hack/gendocs.sh, make docs), they write them.
package refpages

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"

	"github.com/edgedrain/edgedrain/internal/cli"
)

// UpdateEnv names the environment variable that has the tests write the pages (value 1) instead
// of comparing them.
const UpdateEnv = "EDGEDRAIN_UPDATE_REFERENCE"

// Dir is where the pages live, relative to the repository's root.
const Dir = "docs/reference"

// Header starts every page: generated, by what, from where.
func Header(from string) string {
	return "<!-- Generated from " + from + " by hack/gendocs.sh (make docs); do not edit. -->\n\n"
}

// RepoRoot finds the repository's root from the working directory (a package's directory when
// go test runs): the nearest directory above holding go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Check compares pages (file name in Dir → content) with the files there and fails for each that
// differs or is missing; a file in Dir that owns says is one of these pages' family (a
// subcommand's page, say) but is not among them fails too, as stale. With UpdateEnv=1 it writes
// the pages and removes the stale files instead.
func Check(t testing.TB, pages map[string][]byte, owns func(name string) bool) {
	t.Helper()
	dir := filepath.Join(RepoRoot(t), Dir)
	update := os.Getenv(UpdateEnv) == "1"
	if update {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	names := make([]string, 0, len(pages))
	for name := range pages {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		path := filepath.Join(dir, name)
		if update {
			if err := os.WriteFile(path, pages[name], 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		have, err := os.ReadFile(path)
		switch {
		case err != nil:
			t.Errorf("%s/%s: %v: run make docs (hack/gendocs.sh) to generate it", Dir, name, err)
		case !bytes.Equal(have, pages[name]):
			t.Errorf("%s/%s differs from what the code generates (%s): run make docs (hack/gendocs.sh) and commit the result",
				Dir, name, firstDifference(have, pages[name]))
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := pages[e.Name()]; ok || !owns(e.Name()) {
			continue
		}
		if update {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s/%s is no longer generated (its command is gone): run make docs (hack/gendocs.sh) to remove it", Dir, e.Name())
	}
}

// firstDifference says where two versions of a page part, for the failure message.
func firstDifference(have, want []byte) string {
	h, w := strings.Split(string(have), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(h) || i < len(w); i++ {
		switch {
		case i >= len(h):
			return fmt.Sprintf("line %d missing: %q", i+1, w[i])
		case i >= len(w):
			return fmt.Sprintf("line %d is no longer generated: %q", i+1, h[i])
		case h[i] != w[i]:
			return fmt.Sprintf("line %d is %q, the code says %q", i+1, h[i], w[i])
		}
	}
	return "same lines"
}

// CommandPages renders root and every command under it with cobra's Markdown generator, a page
// each named as cobra names them (root.md, root_sub.md, ...). root must be a fresh tree: its
// flags are changed for the pages, each usage naming the flag's environment variable
// (cli.EnvAnnotation) and each default that depends on the machine replaced by its placeholder
// (cli.DocDefaultAnnotation). Every command's Long text, laid out for a terminal, is kept as it is
// in a text block. from names the code, for the header.
func CommandPages(root *cobra.Command, from string) (map[string][]byte, error) {
	root.InitDefaultCompletionCmd()
	seen := map[*pflag.Flag]bool{}
	var prepare func(c *cobra.Command)
	prepare = func(c *cobra.Command) {
		c.DisableAutoGenTag = true
		if c.Long != "" {
			c.Long = "```text\n" + strings.TrimRight(c.Long, "\n") + "\n```"
		}
		for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				if seen[f] {
					return
				}
				seen[f] = true
				if p := f.Annotations[cli.DocDefaultAnnotation]; len(p) > 0 {
					f.DefValue = p[0]
				}
				if env := cli.Env(f); env != "" {
					f.Usage += " [$" + env + "]"
				}
			})
		}
		for _, sub := range c.Commands() {
			prepare(sub)
		}
	}
	prepare(root)
	pages := map[string][]byte{}
	var render func(c *cobra.Command) error
	render = func(c *cobra.Command) error {
		for _, sub := range c.Commands() {
			if !sub.IsAvailableCommand() || sub.IsAdditionalHelpTopicCommand() {
				continue
			}
			if err := render(sub); err != nil {
				return err
			}
		}
		var b bytes.Buffer
		b.WriteString(Header(from))
		if !c.HasParent() && hasEnv(c) {
			b.WriteString("A flag shown with [$VARIABLE] is taken from that environment variable when the command line\n" +
				"does not give it; the command line wins over the environment, which wins over the default.\n\n")
		}
		if err := doc.GenMarkdownCustom(c, &b, func(s string) string { return s }); err != nil {
			return err
		}
		pages[strings.ReplaceAll(c.CommandPath(), " ", "_")+".md"] = b.Bytes()
		return nil
	}
	return pages, render(root)
}

// hasEnv says whether any flag of c or a command under it has an environment variable.
func hasEnv(c *cobra.Command) bool {
	found := false
	for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
		fs.VisitAll(func(f *pflag.Flag) { found = found || cli.Env(f) != "" })
	}
	for _, sub := range c.Commands() {
		found = found || hasEnv(sub)
	}
	return found
}

// Owns says whether file name is one of program's command pages (program.md, program_*.md).
func Owns(program string) func(name string) bool {
	return func(name string) bool {
		return name == program+".md" || (strings.HasPrefix(name, program+"_") && strings.HasSuffix(name, ".md"))
	}
}

// Isolate clears, for the test, the environment variables the programs' defaults depend on, so
// that the pages do not depend on where they are generated.
func Isolate(t testing.TB) {
	t.Helper()
	for _, v := range []string{"POD_NAME", "POD_NAMESPACE", "NODE_NAME", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT",
		"KUBERNETES_MASTER", "DBUS_SYSTEM_BUS_ADDRESS"} {
		t.Setenv(v, "")
	}
}

// CheckPortable fails for a page that names this machine: its host name, the home directory, or
// the checkout's path (a default taken from the machine without a cli.DocDefault placeholder).
func CheckPortable(t testing.TB, pages map[string][]byte) {
	t.Helper()
	var local []string
	if h, err := os.Hostname(); err == nil && len(h) >= 8 && h != "localhost" {
		local = append(local, h)
	}
	if h, err := os.UserHomeDir(); err == nil && len(h) > 1 {
		local = append(local, h)
	}
	local = append(local, RepoRoot(t))
	for name, page := range pages {
		for _, s := range local {
			if bytes.Contains(page, []byte(s)) {
				t.Errorf("%s names this machine (%q): give the flag whose default it is a placeholder (cli.DocDefault)", name, s)
			}
		}
	}
}

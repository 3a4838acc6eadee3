// Package docs holds the project's documentation and the tests that keep it honest. The
// documentation is split over many files that link to one another and to the code; a file moved
// or a heading renamed breaks links silently on GitHub, so TestMarkdownLinks checks every relative
// link and anchor in the repository's Markdown.
package docs

import (
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"
)

// markdownLink is one relative-or-not link found in a Markdown file.
type markdownLink struct {
	// Line is the 1-based line the link's target starts on.
	Line int
	// Target is the link's destination as written: "docs/x.md#anchor", "#anchor", "https://…".
	Target string
}

// linkProblem is a link whose target or anchor does not exist.
type linkProblem struct {
	File   string // slash-separated, relative to the root checked
	Line   int
	Target string
	Why    string
}

func (p linkProblem) String() string {
	return fmt.Sprintf("%s:%d: link %q: %s", p.File, p.Line, p.Target, p.Why)
}

// skippedDirs are never walked: version control, build output, dependencies, and test fixtures
// (whose Markdown may be broken on purpose).
var skippedDirs = map[string]bool{".git": true, "bin": true, "node_modules": true, "testdata": true, ".cache": true}

// TestMarkdownLinks fails for every relative link in the repository's Markdown whose file is
// missing, and every anchor that names no heading of the Markdown file it points into.
func TestMarkdownLinks(t *testing.T) {
	// The test runs in docs/; the repository is its parent.
	problems, files, err := checkMarkdownTree("..")
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatal("no Markdown files found: is the test running from docs/?")
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// checkMarkdownTree checks every *.md file under root and returns the problems, sorted, and the
// number of files checked.
func checkMarkdownTree(root string) ([]linkProblem, int, error) {
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && skippedDirs[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.EqualFold(filepath.Ext(path), ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	c := &linkChecker{root: root, anchors: map[string]map[string]bool{}}
	var problems []linkProblem
	for _, f := range files {
		ps, err := c.checkFile(f)
		if err != nil {
			return nil, 0, err
		}
		problems = append(problems, ps...)
	}
	sort.Slice(problems, func(i, j int) bool {
		if problems[i].File != problems[j].File {
			return problems[i].File < problems[j].File
		}
		return problems[i].Line < problems[j].Line
	})
	return problems, len(files), nil
}

// linkChecker resolves links against a tree, reading each Markdown target's anchors once.
type linkChecker struct {
	root    string
	anchors map[string]map[string]bool // by cleaned path
}

// schemeRE matches a link with a URL scheme (http:, https:, mailto:, …): not a file of the
// repository, so not ours to check.
var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// lineAnchorRE matches GitHub's line anchors into a file's source view (#L10, #L10-L20).
var lineAnchorRE = regexp.MustCompile(`^L\d+(-L\d+)?$`)

func (c *linkChecker) checkFile(path string) ([]linkProblem, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(c.root, path)
	if err != nil {
		return nil, err
	}
	var problems []linkProblem
	report := func(l markdownLink, why string) {
		problems = append(problems, linkProblem{File: filepath.ToSlash(rel), Line: l.Line, Target: l.Target, Why: why})
	}
	for _, l := range extractMarkdownLinks(string(src)) {
		target := l.Target
		if schemeRE.MatchString(target) {
			continue
		}
		if target == "" {
			report(l, "empty target")
			continue
		}
		file, anchor, _ := strings.Cut(target, "#")
		file, _, _ = strings.Cut(file, "?")
		file, err := url.PathUnescape(file)
		if err != nil {
			report(l, "bad escape in path: "+err.Error())
			continue
		}
		if anchor, err = url.PathUnescape(anchor); err != nil {
			report(l, "bad escape in anchor: "+err.Error())
			continue
		}
		resolved := path
		if file != "" {
			// GitHub resolves a leading slash from the repository's root, anything else from
			// the linking file's directory.
			if strings.HasPrefix(file, "/") {
				resolved = filepath.Join(c.root, filepath.FromSlash(file))
			} else {
				resolved = filepath.Join(filepath.Dir(path), filepath.FromSlash(file))
			}
			inside, err := filepath.Rel(c.root, resolved)
			if err != nil || inside == ".." || strings.HasPrefix(inside, ".."+string(filepath.Separator)) {
				report(l, "points outside the repository")
				continue
			}
			if _, err := os.Stat(resolved); err != nil {
				report(l, "no such file: "+filepath.ToSlash(inside))
				continue
			}
		}
		if anchor == "" {
			continue
		}
		if !strings.EqualFold(filepath.Ext(resolved), ".md") {
			// Anchors into other files are the rendered view's: only line anchors can be told
			// apart from mistakes.
			if !lineAnchorRE.MatchString(anchor) {
				report(l, "anchor into a file that is not Markdown (only #L<n> anchors are checked there)")
			}
			continue
		}
		anchors, err := c.anchorsOf(resolved)
		if err != nil {
			return nil, err
		}
		if !anchors[anchor] {
			where := "this file"
			if file != "" {
				where = filepath.ToSlash(file)
			}
			report(l, fmt.Sprintf("no heading with anchor #%s in %s", anchor, where))
		}
	}
	return problems, nil
}

func (c *linkChecker) anchorsOf(path string) (map[string]bool, error) {
	key := filepath.Clean(path)
	if a, ok := c.anchors[key]; ok {
		return a, nil
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	a := headingAnchors(string(src))
	c.anchors[key] = a
	return a, nil
}

// fenceRE matches the opening or closing line of a fenced code block: up to three spaces, then
// three or more backticks or tildes.
var fenceRE = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})")

// codeMask returns src with fenced code blocks and inline code spans blanked out (every byte but
// newlines replaced by a space), so that offsets and line numbers stay those of src, and inCode
// tells, per line, whether the line belongs to a fenced block (its fences included).
func codeMask(src string) (masked string, inCode []bool) {
	lines := strings.SplitAfter(src, "\n")
	inCode = make([]bool, len(lines))
	out := []byte(src)
	blank := func(from, to int) {
		for i := from; i < to; i++ {
			if out[i] != '\n' {
				out[i] = ' '
			}
		}
	}
	// Fenced blocks first: a fence closes only with the same character, at least as long, and
	// nothing after it but spaces. An unclosed fence runs to the end of the file.
	var fence string
	off := 0
	for i, line := range lines {
		body := strings.TrimRight(line, "\r\n")
		if fence == "" {
			if m := fenceRE.FindStringSubmatch(body); m != nil && !(m[1][0] == '`' && strings.Contains(body[len(m[0]):], "`")) {
				fence = m[1]
			}
		} else if m := fenceRE.FindStringSubmatch(body); m != nil && m[1][0] == fence[0] &&
			len(m[1]) >= len(fence) && strings.TrimSpace(body[len(m[0]):]) == "" {
			fence = ""
			inCode[i] = true
			blank(off, off+len(line))
			off += len(line)
			continue
		}
		if fence != "" {
			inCode[i] = true
			blank(off, off+len(line))
		}
		off += len(line)
	}
	// Inline code spans: a run of n backticks up to the next run of exactly n, within one
	// paragraph (a blank line ends it). A run with no partner is literal text.
	s := string(out)
	for i := 0; i < len(s); {
		if s[i] == '\\' && i+1 < len(s) && s[i+1] == '`' {
			i += 2
			continue
		}
		if s[i] != '`' {
			i++
			continue
		}
		n := 0
		for i+n < len(s) && s[i+n] == '`' {
			n++
		}
		end := closingBackticks(s, i+n, n)
		if end < 0 {
			i += n
			continue
		}
		// Blanking changes only what lies before end+n, so s still holds what follows.
		blank(i, end+n)
		i = end + n
	}
	return string(out), inCode
}

// closingBackticks returns where the run of exactly n backticks closing a code span that starts
// at from begins, or -1 when the paragraph ends first.
func closingBackticks(s string, from, n int) int {
	for j := from; j < len(s); {
		if strings.HasPrefix(s[j:], "\n") && isBlankLineAt(s, j+1) {
			return -1
		}
		if s[j] != '`' {
			j++
			continue
		}
		m := 0
		for j+m < len(s) && s[j+m] == '`' {
			m++
		}
		if m == n {
			return j
		}
		j += m
	}
	return -1
}

func isBlankLineAt(s string, at int) bool {
	end := strings.IndexByte(s[at:], '\n')
	if end < 0 {
		end = len(s) - at
	}
	return strings.TrimSpace(s[at:at+end]) == ""
}

var (
	// inlineLinkRE matches [text](target) and ![alt](target), the target optionally in angle
	// brackets and followed by a title. The text may span lines (a wrapped paragraph).
	inlineLinkRE = regexp.MustCompile(`!?\[((?:[^\[\]\\]|\\.)*)\]\(\s*(<[^<>\n]*>|[^\s()]*)(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)`)
	// refDefRE matches a reference definition "[label]: target" at the start of a line;
	// footnotes ([^1]: …) are not links.
	refDefRE = regexp.MustCompile(`(?m)^ {0,3}\[([^\]^][^\]]*)\]:[ \t]*(<[^<>\n]*>|\S+)`)
)

// extractMarkdownLinks returns the links of a Markdown document — inline links and images, and
// reference definitions — leaving out those in fenced code blocks and inline code.
func extractMarkdownLinks(src string) []markdownLink {
	masked, _ := codeMask(src)
	lineAt := func(off int) int { return strings.Count(masked[:off], "\n") + 1 }
	var links []markdownLink
	for _, m := range inlineLinkRE.FindAllStringSubmatchIndex(masked, -1) {
		if m[0] > 0 && masked[m[0]-1] == '\\' {
			continue // \[ is a literal bracket
		}
		target := strings.TrimSuffix(strings.TrimPrefix(masked[m[4]:m[5]], "<"), ">")
		links = append(links, markdownLink{Line: lineAt(m[4]), Target: target})
	}
	for _, m := range refDefRE.FindAllStringSubmatchIndex(masked, -1) {
		target := strings.TrimSuffix(strings.TrimPrefix(masked[m[4]:m[5]], "<"), ">")
		links = append(links, markdownLink{Line: lineAt(m[4]), Target: target})
	}
	sort.SliceStable(links, func(i, j int) bool { return links[i].Line < links[j].Line })
	return links
}

var (
	atxHeadingRE = regexp.MustCompile(`^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setextRE     = regexp.MustCompile(`^ {0,3}(=+|-+)[ \t]*$`)
	// htmlAnchorRE matches explicit anchors GitHub keeps: <a name="x"> or any tag's id="x".
	htmlAnchorRE = regexp.MustCompile(`<[A-Za-z][^>]*\s(?:name|id)\s*=\s*"([^"]+)"`)
	// headingLinkRE and headingImageRE reduce a heading's links and images to their text, as
	// GitHub's rendering does before it makes the anchor.
	headingImageRE = regexp.MustCompile(`!\[([^\]]*)\]\([^)]*\)`)
	headingLinkRE  = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	htmlTagRE      = regexp.MustCompile(`<[^>]*>`)
)

// headingAnchors returns the anchors GitHub gives a Markdown document's headings (and its
// explicit HTML anchors). A heading whose slug was taken already gets -1, -2, … in order.
func headingAnchors(src string) map[string]bool {
	_, inCode := codeMask(src)
	lines := strings.Split(src, "\n")
	anchors := map[string]bool{}
	seen := map[string]int{}
	add := func(text string) {
		slug := githubSlug(headingText(text))
		n, dup := seen[slug]
		seen[slug] = n + 1
		if dup {
			slug = fmt.Sprintf("%s-%d", slug, n)
		}
		anchors[slug] = true
	}
	for i, raw := range lines {
		line := strings.TrimRight(raw, "\r")
		if i < len(inCode) && inCode[i] {
			continue
		}
		for _, m := range htmlAnchorRE.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
		if m := atxHeadingRE.FindStringSubmatch(line); m != nil {
			add(m[1])
			continue
		}
		// A setext heading: a paragraph line underlined with = or -. Lines that cannot be a
		// paragraph's (a table row, a list item, a heading) make the - a thematic break.
		if i > 0 && setextRE.MatchString(line) && !(i-1 < len(inCode) && inCode[i-1]) {
			prev := strings.TrimSpace(strings.TrimRight(lines[i-1], "\r"))
			if prev != "" && !strings.HasPrefix(prev, "#") && !strings.HasPrefix(prev, "|") &&
				!strings.HasPrefix(prev, ">") && !listItemRE.MatchString(prev) {
				add(prev)
			}
		}
	}
	return anchors
}

var listItemRE = regexp.MustCompile(`^([-*+]|\d+[.)])(\s|$)`)

// headingText is the text GitHub renders for a heading's source: code spans keep their content,
// links and images keep their text, HTML tags go.
func headingText(src string) string {
	s := headingImageRE.ReplaceAllString(src, "$1")
	s = headingLinkRE.ReplaceAllString(s, "$1")
	s = htmlTagRE.ReplaceAllString(s, "")
	return strings.ReplaceAll(s, "`", "")
}

// githubSlug is GitHub's anchor for a heading's text: lowercased; letters, marks, digits,
// connector punctuation (_), hyphens and spaces kept and everything else dropped; then each space
// becomes a hyphen (runs are not collapsed: "a -- b" gives "a----b").
func githubSlug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-', unicode.IsLetter(r), unicode.IsMark(r), unicode.IsDigit(r), unicode.IsNumber(r), unicode.Is(unicode.Pc, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestGithubSlug(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"How a drain goes", "how-a-drain-goes"},
		{"Maintenance policy: when, whether, in what order", "maintenance-policy-when-whether-in-what-order"},
		{"Measured here (2 cores, loopback)", "measured-here-2-cores-loopback"},
		{"Many sites: `edgedrainctl status --js-domain SITE,...`", "many-sites-edgedrainctl-status---js-domain-site"},
		{"Virtual machines (KubeVirt)", "virtual-machines-kubevirt"},
		{"snake_case & co.", "snake_case--co"},
		{"Straße, Ünïcode", "straße-ünïcode"},
		{"See [the design](design.md)", "see-the-design"},
		{"  trimmed  ", "trimmed"},
	} {
		if got := githubSlug(headingText(tc.heading)); got != tc.want {
			t.Errorf("slug of %q = %q, want %q", tc.heading, got, tc.want)
		}
	}
}

func TestHeadingAnchors(t *testing.T) {
	src := "# Title\n\n## Usage\n\ntext\n\n## Usage\n\n### Usage ###\n\n```sh\n# not a heading\n```\n\n" +
		"Setext heading\n---\n\n- item\n---\n\n<a name=\"explicit\"></a>\n"
	got := headingAnchors(src)
	for _, want := range []string{"title", "usage", "usage-1", "usage-2", "setext-heading", "explicit"} {
		if !got[want] {
			t.Errorf("anchor %q missing from %v", want, got)
		}
	}
	for _, not := range []string{"not-a-heading", "item", "usage-3"} {
		if got[not] {
			t.Errorf("anchor %q should not exist: %v", not, got)
		}
	}
}

func TestExtractMarkdownLinks(t *testing.T) {
	src := "See [the design](design.md#invariants) and ![a picture](img/x.png \"title\").\n" + // 1
		"Code: `[not](a-link.md)` and ``[nor `this`](one.md)``.\n" + // 2
		"```\n[fenced](away.md)\n```\n" + // 3-5
		"A [link whose text\nwraps](wrapped.md) here.\n" + // 6-7
		"[web](https://example.com) [mail](mailto:a@b.c) \\[escaped](no.md)\n" + // 8
		"[ref]: ../README.md#top\n" + // 9
		"[^1]: a footnote, not a link\n" + // 10
		"`code that\nwraps [x](y.md)` and <https://auto.link>\n" // 11-12
	got := extractMarkdownLinks(src)
	want := []markdownLink{
		{1, "design.md#invariants"},
		{1, "img/x.png"},
		{7, "wrapped.md"},
		{8, "https://example.com"},
		{8, "mailto:a@b.c"},
		{9, "../README.md#top"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("links:\n got %v\nwant %v", got, want)
	}
}

// TestCheckFindsBrokenLinks builds a small tree with good and broken links, so that the checker
// itself is shown to fail when it should.
func TestCheckFindsBrokenLinks(t *testing.T) {
	root := t.TempDir()
	write := func(name, content string) {
		path := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", "# Top\n\n## Install\n\n"+
		"[ok](docs/a.md) [ok anchor](docs/a.md#some-heading) [self](#install) [code](main.go#L3)\n"+
		"[dir](docs) [site](https://example.com/missing.md)\n"+
		"[missing](docs/missing.md)\n"+ // line 7
		"[bad anchor](docs/a.md#no-such-heading)\n"+ // line 8
		"[bad self](#nowhere)\n"+ // line 9
		"[outside](../elsewhere.md)\n"+ // line 10
		"```\n[in code](nothing.md)\n```\n"+
		"[ref]: docs/gone.md\n") // line 14
	write("docs/a.md", "# A\n\n## Some heading\n\n[back](../README.md#top) [up](/README.md)\n")
	write("main.go", "package main\n")
	write("testdata/broken.md", "[skipped](nothing.md)\n")

	problems, files, err := checkMarkdownTree(root)
	if err != nil {
		t.Fatal(err)
	}
	if files != 2 {
		t.Errorf("checked %d files, want 2 (testdata skipped)", files)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	want := []string{
		`README.md:7: link "docs/missing.md": no such file: docs/missing.md`,
		`README.md:8: link "docs/a.md#no-such-heading": no heading with anchor #no-such-heading in docs/a.md`,
		`README.md:9: link "#nowhere": no heading with anchor #nowhere in this file`,
		`README.md:10: link "../elsewhere.md": points outside the repository`,
		`README.md:14: link "docs/gone.md": no such file: docs/gone.md`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
}

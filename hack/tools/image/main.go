// Command image assembles edgedrain's container image from binaries already built, without a
// container runtime or any base image: one layer holding the static programs, a passwd/group
// naming the unprivileged user they run as, and /tmp. It writes an OCI image layout (an index
// with one image per platform, tagged) and the same layout as a tar archive (oci-archive), both
// byte-for-byte reproducible: every timestamp is --created, every file is owned by root with a
// fixed mode, and the entries are in a fixed order.
//
// hack/image.sh builds the binaries and runs this; see `make image`.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The programs in edgedrain's image, at its root; the first is the entrypoint.
const defaultPrograms = "coordinator,agent,edgedrainctl"

// The unprivileged user and group the image runs as (the coordinator's Deployment names it too).
const (
	uid      = 65532
	userName = "nonroot"
)

const usage = `usage: image --bin-dir DIR --platforms linux/amd64,linux/arm64 --out DIR --archive FILE [flags]

Assembles edgedrain's OCI image from binaries built beforehand in DIR/<os>_<arch>/ (coordinator,
agent, edgedrainctl: static, CGO_ENABLED=0). Writes an OCI image layout to --out (its index.json
names the image index by --tag) and the same layout as a tar archive to --archive. With
--programs it assembles another image the same way (the tests' images for real nodes).

Flags:
`

type options struct {
	binDir, out, archive     string
	platforms                []v1.Platform
	repo, tag, revision, src string
	created                  time.Time
	programs                 []string // the first is the entrypoint
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	o, err := parse(args)
	if err != nil {
		return err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range o.platforms {
		img, err := o.image(p)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", p.OS, p.Architecture, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: p.OS, Architecture: p.Architecture}}})
	}
	idx = mutate.Annotations(idx, o.annotations()).(v1.ImageIndex)
	if err := os.RemoveAll(o.out); err != nil {
		return err
	}
	lp, err := layout.Write(o.out, empty.Index)
	if err != nil {
		return fmt.Errorf("writing the layout: %w", err)
	}
	ref := map[string]string{
		"org.opencontainers.image.ref.name": o.tag,
		"io.containerd.image.name":          o.repo + ":" + o.tag,
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(ref)); err != nil {
		return fmt.Errorf("writing the layout: %w", err)
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	if err := archiveDir(o.out, o.archive, o.created); err != nil {
		return fmt.Errorf("writing the archive: %w", err)
	}
	fmt.Printf("%s:%s %s\n  layout  %s\n  archive %s\n", o.repo, o.tag, digest, o.out, o.archive)
	return nil
}

func parse(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage); fs.PrintDefaults() }
	var platforms, created, programs string
	fs.StringVar(&o.binDir, "bin-dir", "", "directory with one <os>_<arch> directory of binaries per platform (required)")
	fs.StringVar(&platforms, "platforms", "linux/amd64", "comma-separated os/arch list")
	fs.StringVar(&o.out, "out", "", "OCI image layout directory to write; replaced if present (required)")
	fs.StringVar(&o.archive, "archive", "", "the layout as a tar archive (oci-archive) to write (required)")
	fs.StringVar(&o.repo, "repo", "ghcr.io/edgedrain/edgedrain", "image repository, recorded in the layout for importers")
	fs.StringVar(&o.tag, "tag", "dev", "the image's tag")
	fs.StringVar(&o.revision, "revision", "", "source revision (git commit) for the labels")
	fs.StringVar(&o.src, "source", "https://github.com/edgedrain/edgedrain", "source URL for the labels")
	fs.StringVar(&created, "created", "0", "creation time, Unix seconds (e.g. the commit's time, for a reproducible image)")
	fs.StringVar(&programs, "programs", defaultPrograms, "comma-separated binaries of --bin-dir to put at the image's root; the first is its entrypoint")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var errs []error
	for name, v := range map[string]string{"--bin-dir": o.binDir, "--out": o.out, "--archive": o.archive} {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is required", name))
		}
	}
	secs, err := strconv.ParseInt(created, 10, 64)
	if err != nil || secs < 0 {
		errs = append(errs, fmt.Errorf("--created %q: want Unix seconds", created))
	}
	o.created = time.Unix(secs, 0).UTC()
	for _, p := range strings.Split(programs, ",") {
		if p = strings.TrimSpace(p); p == "" || strings.ContainsAny(p, "/\\") {
			errs = append(errs, fmt.Errorf("--programs: %q is not a file name", p))
			continue
		}
		o.programs = append(o.programs, p)
	}
	for _, p := range strings.Split(platforms, ",") {
		goos, arch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok || goos == "" || arch == "" || strings.Contains(arch, "/") {
			errs = append(errs, fmt.Errorf("--platforms: %q is not os/arch", p))
			continue
		}
		o.platforms = append(o.platforms, v1.Platform{OS: goos, Architecture: arch})
	}
	return o, errors.Join(errs...)
}

// annotations are the OCI annotations, set as the image's labels and on its manifests.
func (o *options) annotations() map[string]string {
	a := map[string]string{
		"org.opencontainers.image.title":       "edgedrain",
		"org.opencontainers.image.description": "Drains edge Kubernetes nodes before a reboot, shutdown or OS update, with volume data kept safe: /coordinator (default entrypoint), /agent, /edgedrainctl",
		"org.opencontainers.image.source":      o.src,
		"org.opencontainers.image.version":     o.tag,
		"org.opencontainers.image.created":     o.created.Format(time.RFC3339),
	}
	if o.revision != "" {
		a["org.opencontainers.image.revision"] = o.revision
	}
	return a
}

// image assembles the image of one platform.
func (o *options) image(p v1.Platform) (v1.Image, error) {
	dir := filepath.Join(o.binDir, p.OS+"_"+p.Architecture)
	files, err := o.rootfs(dir)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(files)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	created := v1.Time{Time: o.created}
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, History: v1.History{
		Created: created, CreatedBy: "hack/image.sh: " + strings.Join(o.programs, ", ") + ", passwd, group, /tmp",
		Comment: "static Go binaries, no base image"}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = p.OS, p.Architecture, created
	cf.Author = "edgedrain"
	cf.Config = v1.Config{
		Entrypoint: []string{"/" + o.programs[0]},
		User:       fmt.Sprintf("%d:%d", uid, uid),
		WorkingDir: "/",
		Env:        []string{"PATH=/"},
		Labels:     o.annotations(),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, o.annotations()).(v1.Image), nil
}

// rootfs returns the layer's uncompressed tar: fixed order, owner and time.
func (o *options) rootfs(binDir string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, mode int64, typ byte, body []byte) error {
		h := &tar.Header{Name: name, Mode: mode, Typeflag: typ, Size: int64(len(body)),
			ModTime: o.created, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/:/sbin/nologin\n%s:x:%d:%d:%s:/:/sbin/nologin\n", userName, uid, uid, userName)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", userName, uid)
	entries := []struct {
		name string
		mode int64
		typ  byte
		body []byte
	}{
		{"etc/", 0o755, tar.TypeDir, nil},
		{"etc/group", 0o644, tar.TypeReg, []byte(group)},
		{"etc/passwd", 0o644, tar.TypeReg, []byte(passwd)},
		{"tmp/", 0o1777, tar.TypeDir, nil},
	}
	for _, e := range entries {
		if err := add(e.name, e.mode, e.typ, e.body); err != nil {
			return nil, err
		}
	}
	names := append([]string(nil), o.programs...)
	sort.Strings(names)
	for _, name := range names {
		body, err := os.ReadFile(filepath.Join(binDir, name))
		if err != nil {
			return nil, fmt.Errorf("the %s binary: %w (build it first: hack/image.sh does)", name, err)
		}
		if err := add(name, 0o755, tar.TypeReg, body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// archiveDir writes the tree under dir as a tar at file, in lexical order with fixed owner and
// time, so the same layout always gives the same archive.
func archiveDir(dir, file string, mtime time.Time) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	tmp := file + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: mtime, Mode: 0o644, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if d.IsDir() {
			h.Name, h.Mode, h.Typeflag = h.Name+"/", 0o755, tar.TypeDir
			return tw.WriteHeader(h)
		}
		body, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		h.Size = int64(len(body))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = tw.Write(body)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

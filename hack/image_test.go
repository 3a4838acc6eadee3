// Package hack_test checks `make image` (hack/image.sh) with a real OCI tool, skopeo: the image
// index and its platforms, each image's config (user, entrypoint, labels), its filesystem (the
// static programs run --help from it), and that two builds of one tree are the same image.
package hack_test

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
)

const (
	tag      = "test"
	epoch    = 1767225600 // 2026-01-01T00:00:00Z
	revision = "0123456789abcdef0123456789abcdef01234567"
)

// buildImage runs hack/image.sh into dir and returns the layout directory and the archive.
func buildImage(t *testing.T, root, dir string) (layout, archive string) {
	t.Helper()
	layout, archive = filepath.Join(dir, "oci"), filepath.Join(dir, "edgedrain.tar")
	cmd := exec.Command("bash", filepath.Join(root, "hack", "image.sh"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "IMAGE_PLATFORMS=linux/amd64,linux/arm64", "IMAGE_TAG="+tag,
		"IMAGE_OUT="+layout, "IMAGE_ARCHIVE="+archive, "SOURCE_DATE_EPOCH=1767225600", "IMAGE_REVISION="+revision)
	started := time.Now()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "hack/image.sh: %s", out)
	t.Logf("hack/image.sh took %s:\n%s", time.Since(started).Round(time.Second), out)
	return layout, archive
}

func skopeo(t *testing.T, args ...string) []byte {
	t.Helper()
	bin, err := exec.LookPath("skopeo")
	require.NoError(t, err, "skopeo is needed (Debian package skopeo; .ci/run installs it)")
	out, err := exec.Command(bin, args...).Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		require.NoError(t, err, "skopeo %v: %s", args, exit.Stderr)
	}
	require.NoError(t, err, "skopeo %v", args)
	return out
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries for two platforms")
	}
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	layout, archive := buildImage(t, root, t.TempDir())
	ref := "oci:" + layout + ":" + tag

	t.Run("an OCI index with an image per platform", func(t *testing.T) {
		var index struct {
			MediaType string `json:"mediaType"`
			Manifests []struct {
				MediaType string `json:"mediaType"`
				Platform  struct{ OS, Architecture string }
			} `json:"manifests"`
			Annotations map[string]string `json:"annotations"`
		}
		require.NoError(t, json.Unmarshal(skopeo(t, "inspect", "--raw", ref), &index))
		assert.Equal(t, "application/vnd.oci.image.index.v1+json", index.MediaType)
		var platforms []string
		for _, m := range index.Manifests {
			assert.Equal(t, "application/vnd.oci.image.manifest.v1+json", m.MediaType)
			platforms = append(platforms, m.Platform.OS+"/"+m.Platform.Architecture)
		}
		assert.Equal(t, []string{"linux/amd64", "linux/arm64"}, platforms)
		assert.Equal(t, tag, index.Annotations["org.opencontainers.image.version"])
	})

	for _, arch := range []string{"amd64", "arm64"} {
		t.Run(arch, func(t *testing.T) {
			var cfg struct {
				Architecture, OS string
				Created          time.Time
				Config           struct {
					User, WorkingDir string
					Entrypoint, Env  []string
					Labels           map[string]string
				}
			}
			require.NoError(t, json.Unmarshal(skopeo(t, "--override-arch", arch, "inspect", "--config", ref), &cfg))
			assert.Equal(t, arch, cfg.Architecture)
			assert.Equal(t, "linux", cfg.OS)
			assert.Equal(t, "65532:65532", cfg.Config.User, "the image runs as a user without privileges")
			assert.Equal(t, []string{"/coordinator"}, cfg.Config.Entrypoint)
			assert.Equal(t, time.Unix(epoch, 0).UTC(), cfg.Created.UTC(), "created is SOURCE_DATE_EPOCH")
			assert.Equal(t, "edgedrain", cfg.Config.Labels["org.opencontainers.image.title"])
			assert.Equal(t, tag, cfg.Config.Labels["org.opencontainers.image.version"])
			assert.Equal(t, revision, cfg.Config.Labels["org.opencontainers.image.revision"])

			// The archive holds the same image.
			var fromArchive struct{ Digest, Architecture string }
			require.NoError(t, json.Unmarshal(skopeo(t, "--override-arch", arch, "inspect", "oci-archive:"+archive+":"+tag), &fromArchive))
			var fromLayout struct{ Digest string }
			require.NoError(t, json.Unmarshal(skopeo(t, "--override-arch", arch, "inspect", ref), &fromLayout))
			assert.Equal(t, fromLayout.Digest, fromArchive.Digest)
			assert.Equal(t, arch, fromArchive.Architecture)

			rootfs := extract(t, arch, ref)
			checkFilesystem(t, rootfs, arch)
		})
	}

	t.Run("reproducible: the same tree gives the same image", func(t *testing.T) {
		layout2, archive2 := buildImage(t, root, t.TempDir())
		assert.Equal(t, fileSum(t, filepath.Join(layout, "index.json")), fileSum(t, filepath.Join(layout2, "index.json")))
		assert.Equal(t, fileSum(t, archive), fileSum(t, archive2))
	})
}

// extract copies arch's image out with skopeo (dir: transport) and unpacks its one layer.
func extract(t *testing.T, arch, ref string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "image")
	skopeo(t, "--override-arch", arch, "copy", ref, "dir:"+dir)
	var manifest struct {
		Layers []struct{ MediaType, Digest string }
	}
	data, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &manifest))
	require.Len(t, manifest.Layers, 1, "one layer, no base image")
	assert.Equal(t, "application/vnd.oci.image.layer.v1.tar+gzip", manifest.Layers[0].MediaType)
	f, err := os.Open(filepath.Join(dir, strings.TrimPrefix(manifest.Layers[0].Digest, "sha256:")))
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	rootfs := t.TempDir()
	tr := tar.NewReader(zr)
	var entries []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		entries = append(entries, h.Name+" "+h.FileInfo().Mode().String())
		assert.Equal(t, 0, h.Uid, h.Name)
		assert.Equal(t, time.Unix(epoch, 0).UTC(), h.ModTime.UTC(), h.Name)
		target := filepath.Join(rootfs, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			require.NoError(t, os.MkdirAll(target, 0o755))
			continue
		}
		body, err := io.ReadAll(tr)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(target, body, os.FileMode(h.Mode).Perm()))
	}
	assert.Equal(t, []string{"etc/ drwxr-xr-x", "etc/group -rw-r--r--", "etc/passwd -rw-r--r--", "tmp/ dtrwxrwxrwx",
		"agent -rwxr-xr-x", "coordinator -rwxr-xr-x", "edgedrainctl -rwxr-xr-x"}, entries,
		"the layer holds the programs, passwd, group and /tmp, nothing else")
	return rootfs
}

// checkFilesystem checks the unpacked filesystem: the user exists, the programs are static
// binaries for arch, and those for this machine's architecture run --help.
func checkFilesystem(t *testing.T, rootfs, arch string) {
	t.Helper()
	passwd, err := os.ReadFile(filepath.Join(rootfs, "etc", "passwd"))
	require.NoError(t, err)
	assert.Contains(t, string(passwd), "nonroot:x:65532:65532:")
	group, err := os.ReadFile(filepath.Join(rootfs, "etc", "group"))
	require.NoError(t, err)
	assert.Contains(t, string(group), "nonroot:x:65532:")
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	for _, prog := range []string{"coordinator", "agent", "edgedrainctl"} {
		path := filepath.Join(rootfs, prog)
		f, err := elf.Open(path)
		require.NoError(t, err, prog)
		assert.Equal(t, machine, f.Machine, prog)
		for _, p := range f.Progs {
			assert.NotEqual(t, elf.PT_INTERP, p.Type, "%s is dynamically linked: the image has no libc", prog)
		}
		f.Close()
		if arch != runtime.GOARCH {
			continue
		}
		cmd := exec.Command(path, "--help")
		cmd.Dir, cmd.Env = rootfs, []string{"PATH=/"}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s --help: %s", prog, out)
		assert.Contains(t, string(out), "Usage: "+prog, prog)
	}
}

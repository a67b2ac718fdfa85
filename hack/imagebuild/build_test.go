package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"sigs.k8s.io/yaml"
)

// repoRoot is the repository root seen from this package.
const repoRoot = "../.."

// envTestPlatforms overrides the platforms the test builds, e.g. "linux/amd64,linux/arm64".
// By default only the host's platform is built (its binaries are run): a cold cross-compile of
// every dependency for a second architecture takes over ten minutes on a busy 2-core machine.
// `make images` builds both.
const envTestPlatforms = "IMAGEBUILD_TEST_PLATFORMS"

// testPlatforms are the platforms the test builds.
func testPlatforms(t *testing.T) []v1.Platform {
	t.Helper()
	s := os.Getenv(envTestPlatforms)
	if s == "" {
		s = "linux/" + runtime.GOARCH
	}
	ps, err := parsePlatforms(s)
	if err != nil {
		t.Fatalf("%s: %v", envTestPlatforms, err)
	}
	return ps
}

// expectedImages reads what the chart deploys by default, independently of readChart.
func expectedImages(t *testing.T) (tag, source string, refs map[string]string) {
	t.Helper()
	var meta map[string]any
	var values map[string]any
	for file, into := range map[string]any{"Chart.yaml": &meta, "values.yaml": &values} {
		b, err := os.ReadFile(filepath.Join(repoRoot, "charts/callback-platform", file))
		if err != nil {
			t.Fatalf("read chart %s: %v", file, err)
		}
		if err := yaml.Unmarshal(b, into); err != nil {
			t.Fatalf("parse chart %s: %v", file, err)
		}
	}
	tag, _ = meta["appVersion"].(string)
	source, _ = meta["home"].(string)
	if tag == "" || source == "" {
		t.Fatalf("Chart.yaml: want appVersion and home, got %q and %q", tag, source)
	}
	repo := func(key string) string {
		m, _ := values[key].(map[string]any)
		r, _ := m["repository"].(string)
		if r == "" {
			t.Fatalf("values.yaml: want %s.repository, got none", key)
		}
		return r
	}
	refs = map[string]string{
		"operator":  repo("image") + ":" + tag,
		"callbackd": repo("callbackdImage") + ":" + tag,
	}
	return tag, source, refs
}

// TestImages builds both images from the real commands (for the host's platform, or those of
// IMAGEBUILD_TEST_PLATFORMS) and inspects the archives the way a runtime would read them: the
// OCI layout's index and each platform's manifest, config and layers, the docker-save
// manifest.json, and the host binary run from the extracted layer.
func TestImages(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("the go command is needed to build the binaries: %v", err)
	}
	tag, source, refs := expectedImages(t)
	chart, err := readChart(repoRoot)
	if err != nil {
		t.Fatalf("readChart: %v", err)
	}
	// The build is stopped before the test binary's own deadline, so no go build outlives it.
	deadline := time.Now().Add(20 * time.Minute)
	if d, ok := t.Deadline(); ok {
		deadline = d.Add(-30 * time.Second)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	platforms := testPlatforms(t)
	o := options{
		Root: repoRoot, Platforms: platforms, CABundle: caBundlePath,
		Revision: "0123456789abcdef0123456789abcdef01234567", Created: time.Unix(1_700_000_000, 0).UTC(),
	}
	start := time.Now()
	bins, err := buildBinaries(ctx, o, chart.AppVersion, components, t.TempDir())
	if err != nil {
		t.Fatalf("buildBinaries: %v", err)
	}
	t.Logf("binaries for %v built in %s", platforms, time.Since(start).Round(time.Second))

	o.OutDir = t.TempDir()
	start = time.Now()
	results, err := assemble(o, chart, components, bins)
	if err != nil {
		t.Fatalf("assemble: %v", err)
	}
	t.Logf("archives assembled in %s", time.Since(start).Round(10*time.Millisecond))
	if len(results) != len(components) {
		t.Fatalf("results: want %d archives, got %d", len(components), len(results))
	}

	// The same inputs give byte-identical archives (reproducible builds).
	again := o
	again.OutDir = t.TempDir()
	if _, err := assemble(again, chart, components, bins); err != nil {
		t.Fatalf("assemble again: %v", err)
	}

	for _, r := range results {
		t.Run(r.Component, func(t *testing.T) {
			if r.Reference != refs[r.Component] {
				t.Errorf("reference: want the chart default %q, got %q", refs[r.Component], r.Reference)
			}
			if a, b := fileDigest(t, r.Path), fileDigest(t, filepath.Join(again.OutDir, filepath.Base(r.Path))); a != b {
				t.Errorf("reproducibility: two builds of the same inputs differ: %s vs %s", a, b)
			}
			checkArchive(t, r, platforms, archiveWant{
				Ref: refs[r.Component], Tag: tag, Source: source, Revision: o.Revision,
			})
		})
	}
}

type archiveWant struct {
	Ref, Tag, Source, Revision string
}

// checkArchive inspects one archive.
func checkArchive(t *testing.T, r result, platforms []v1.Platform, want archiveWant) {
	dir := t.TempDir()
	untar(t, r.Path, dir)

	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("open OCI layout: %v", err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		t.Fatalf("index.json: %v", err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index.json: want 1 entry, got %d", len(im.Manifests))
	}
	entry := im.Manifests[0]
	if got := entry.Annotations[annotationImageName]; got != want.Ref {
		t.Errorf("index.json %s: want %q, got %q", annotationImageName, want.Ref, got)
	}
	if got := entry.Annotations[annotationRef]; got != want.Tag {
		t.Errorf("index.json %s: want %q, got %q", annotationRef, want.Tag, got)
	}
	idx, err := top.ImageIndex(entry.Digest)
	if err != nil {
		t.Fatalf("image index %s: %v", entry.Digest, err)
	}
	if d, _ := idx.Digest(); d != r.Digest {
		t.Errorf("index digest: reported %s, archive holds %s", r.Digest, d)
	}
	pm, err := idx.IndexManifest()
	if err != nil {
		t.Fatalf("image index manifest: %v", err)
	}
	var gotPlats []string
	var firstConfig v1.Hash
	for i, desc := range pm.Manifests {
		if desc.Platform == nil {
			t.Fatalf("index entry %d has no platform", i)
		}
		gotPlats = append(gotPlats, desc.Platform.String())
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatalf("image %s: %v", desc.Platform, err)
		}
		cfgName, err := img.ConfigName()
		if err != nil {
			t.Fatalf("config name: %v", err)
		}
		if i == 0 {
			firstConfig = cfgName
		}
		t.Run(desc.Platform.Architecture, func(t *testing.T) {
			checkImage(t, r.Component, *desc.Platform, img, want)
		})
	}
	var wantPlats []string
	for _, p := range platforms {
		wantPlats = append(wantPlats, p.String())
	}
	if !slices.Equal(gotPlats, wantPlats) {
		t.Errorf("index platforms: want %v, got %v", wantPlats, gotPlats)
	}

	// The docker-save view (docker load on the classic store, crane, kind load image-archive)
	// is the first platform's image under the chart's reference.
	var dms []dockerManifest
	readJSON(t, filepath.Join(dir, "manifest.json"), &dms)
	if len(dms) != 1 || !slices.Equal(dms[0].RepoTags, []string{want.Ref}) {
		t.Errorf("manifest.json: want one image tagged %q, got %+v", want.Ref, dms)
	}
	dimg, err := tarball.ImageFromPath(r.Path, nil)
	if err != nil {
		t.Fatalf("read the archive as a docker-save tarball: %v", err)
	}
	dcfg, err := dimg.ConfigName()
	if err != nil {
		t.Fatalf("docker-save config: %v", err)
	}
	if dcfg != firstConfig {
		t.Errorf("manifest.json config: want %s (the %s image), got %s", firstConfig, gotPlats[0], dcfg)
	}
}

// checkImage checks one platform's config and layers, and runs the binary when it is the host's.
func checkImage(t *testing.T, name string, p v1.Platform, img v1.Image, want archiveWant) {
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	entrypoint := path.Join(binDir, name)
	checks := []struct {
		what      string
		got, want any
	}{
		{"os", cf.OS, p.OS},
		{"architecture", cf.Architecture, p.Architecture},
		{"entrypoint", cf.Config.Entrypoint, []string{entrypoint}},
		{"cmd", cf.Config.Cmd, []string(nil)},
		{"user", cf.Config.User, "65532:65532"},
		{"label " + labelSource, cf.Config.Labels[labelSource], want.Source},
		{"label " + labelVersion, cf.Config.Labels[labelVersion], want.Tag},
		{"label " + labelRevision, cf.Config.Labels[labelRevision], want.Revision},
		{"label " + labelTitle, cf.Config.Labels[labelTitle], name},
		{"layers", len(cf.RootFS.DiffIDs), 2},
	}
	for _, c := range checks {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("config %s: want %v, got %v", c.what, c.want, c.got)
		}
	}

	files := layerFiles(t, img)
	for _, f := range files {
		base := path.Base(f.Name)
		if slices.Contains([]string{"sh", "bash", "ash", "dash", "busybox", "su", "sudo"}, base) {
			t.Errorf("layer entry %s: want no shell or privilege tool in the image", f.Name)
		}
		if f.Typeflag == tar.TypeReg && f.Mode&0o111 != 0 && f.Name != entrypoint[1:] {
			t.Errorf("layer entry %s (mode %o): want no executable but the entrypoint", f.Name, f.Mode)
		}
		if f.Typeflag == tar.TypeSymlink || f.Typeflag == tar.TypeLink {
			t.Errorf("layer entry %s: want no links, got one to %s", f.Name, f.Linkname)
		}
		if f.Mode&0o6000 != 0 {
			t.Errorf("layer entry %s: want no setuid/setgid bit, got mode %o", f.Name, f.Mode)
		}
	}

	bin, ok := files[entrypoint[1:]]
	if !ok {
		t.Fatalf("entrypoint %s: not in any layer", entrypoint)
	}
	if bin.Mode != 0o755 || bin.Uid != 0 {
		t.Errorf("entrypoint %s: want mode 755 owned by root, got mode %o uid %d", entrypoint, bin.Mode, bin.Uid)
	}
	checkELF(t, bin.Data, p)

	passwd := string(files["etc/passwd"].Data)
	if !strings.Contains(passwd, "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd: want user nonroot 65532, got %q", passwd)
	}
	pool := x509.NewCertPool()
	if ca := files[caBundlePath[1:]]; !pool.AppendCertsFromPEM(ca.Data) {
		t.Errorf("%s: want PEM certificates, got %d bytes none of which parse", caBundlePath, len(ca.Data))
	}
	if tmp, ok := files["tmp"]; !ok || tmp.Mode != 0o1777 {
		t.Errorf("/tmp: want a folder with mode 1777")
	}

	if p.OS == runtime.GOOS && p.Architecture == runtime.GOARCH {
		runExtracted(t, name, bin.Data, want.Tag)
	}
}

// layerEntry is a tar header and, for regular files, the content.
type layerEntry struct {
	tar.Header
	Data []byte
}

// layerFiles flattens the image's layers (later layers win; the images have no whiteouts).
func layerFiles(t *testing.T, img v1.Image) map[string]layerEntry {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatalf("layers: %v", err)
	}
	out := map[string]layerEntry{}
	for i, l := range layers {
		mt, err := l.MediaType()
		if err != nil || mt != "application/vnd.oci.image.layer.v1.tar+gzip" {
			t.Errorf("layer %d media type: want OCI gzip layer, got %q (%v)", i, mt, err)
		}
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatalf("layer %d: %v", i, err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("layer %d: %v", i, err)
			}
			if strings.HasPrefix(path.Base(h.Name), ".wh.") {
				t.Errorf("layer %d entry %s: want no whiteouts", i, h.Name)
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatalf("layer %d %s: %v", i, h.Name, err)
			}
			out[strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")] = layerEntry{Header: *h, Data: data}
		}
		_ = rc.Close()
	}
	return out
}

// checkELF checks that the binary is a static executable for the platform: no program
// interpreter (there is no libc in the image) and the right machine.
func checkELF(t *testing.T, b []byte, p v1.Platform) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("entrypoint is not an ELF binary: %v", err)
	}
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	if f.Machine != machines[p.Architecture] {
		t.Errorf("ELF machine: want %v for %s, got %v", machines[p.Architecture], p.Architecture, f.Machine)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP || prog.Type == elf.PT_DYNAMIC {
			t.Errorf("ELF: want a static binary, found program header %v", prog.Type)
		}
	}
}

// runExtracted runs the binary taken out of the layer, as the container runtime would.
func runExtracted(t *testing.T, name string, b []byte, tag string) {
	t.Helper()
	exe := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatalf("write binary: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args, wantOut := []string{"version"}, "callbackd "+tag
	if name == "operator" {
		args, wantOut = []string{"-help"}, "-leader-elect"
	}
	out, err := exec.CommandContext(ctx, exe, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: want exit 0, got %v\n%s", name, strings.Join(args, " "), err, out)
	}
	if !strings.Contains(string(out), wantOut) {
		t.Errorf("%s %s: want output containing %q, got %q", name, strings.Join(args, " "), wantOut, out)
	}
}

func untar(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatalf("open archive: %v", err)
	}
	defer func() { _ = f.Close() }()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("archive: %v", err)
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || strings.HasPrefix(name, "..") {
			t.Fatalf("archive entry %q escapes the folder", h.Name)
		}
		dst := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatalf("archive %s: %v", h.Name, err)
			}
			if err := os.WriteFile(dst, b, 0o644); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("archive entry %s: unexpected type %c", h.Name, h.Typeflag)
		}
	}
}

func readJSON(t *testing.T, p string, into any) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	if err := json.Unmarshal(b, into); err != nil {
		t.Fatalf("parse %s: %v", p, err)
	}
}

func fileDigest(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
}

// TestDockerfileMatchesImages keeps the Dockerfile (for users with Docker) in step with the
// images built here: same user, same entrypoints, static -trimpath builds, no shell stage at the end.
func TestDockerfileMatchesImages(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatalf("read Dockerfile: %v", err)
	}
	df := string(b)
	cases := []struct {
		name string
		want string
	}{
		{"static build", "CGO_ENABLED=0"},
		{"trimpath", "-trimpath"},
		{"user", fmt.Sprintf("USER %d:%d", nonRootUID, nonRootUID)},
		{"version from the chart", "ARG VERSION"},
		{"component argument", "ARG COMPONENT=callbackd"},
	}
	for _, c := range components {
		cases = append(cases, struct{ name, want string }{
			c.Name + " entrypoint", fmt.Sprintf(`ENTRYPOINT ["%s"]`, path.Join(binDir, c.Name)),
		})
	}
	for _, c := range cases {
		if !strings.Contains(df, c.want) {
			t.Errorf("Dockerfile %s: want a line with %q", c.name, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(repoRoot, ".dockerignore")); err != nil {
		t.Errorf(".dockerignore: want one beside the Dockerfile (keeps bin/, dist/ and .git out of the context): %v", err)
	}
}

package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// component is one image: a command under cmd/.
type component struct {
	Name        string
	Description string
}

// components are the images `make images` builds, in build order.
var components = []component{
	{Name: "callbackd", Description: "callbackd: receives payment-provider callbacks exactly once"},
	{Name: "operator", Description: "The callback-platform operator: reconciles PaymentChannels into callbackd, Redis Sentinel and migration Jobs"},
}

// versionVar is the -X flag target that stamps the version into callbackd (the operator ignores it).
const versionVar = "github.com/seed-1cff2221/callback-platform/callbackd/cli.Version"

// OCI annotation and label keys (image-spec annotations.md).
const (
	labelSource      = "org.opencontainers.image.source"
	labelVersion     = "org.opencontainers.image.version"
	labelRevision    = "org.opencontainers.image.revision"
	labelCreated     = "org.opencontainers.image.created"
	labelTitle       = "org.opencontainers.image.title"
	labelDescription = "org.opencontainers.image.description"
	annotationRef    = "org.opencontainers.image.ref.name"
	// annotationImageName is the full reference that containerd (and Docker's containerd store)
	// give the image on import.
	annotationImageName = "io.containerd.image.name"
)

// options say what to build and where.
type options struct {
	// Root is the repository root (holds go.mod and the chart).
	Root string
	// OutDir receives <component>.tar.
	OutDir string
	// Platforms are built into each image's index, the first one also into the docker-save
	// manifest.json of the archive.
	Platforms []v1.Platform
	// Components to build (names from components); empty means all.
	Components []string
	// CABundle is the PEM bundle copied into the images.
	CABundle string
	// Revision is the source commit for the revision label.
	Revision string
	// Created stamps the config, the layers' files and the archive (reproducible builds).
	Created time.Time
	// Log receives progress lines.
	Log io.Writer
}

// result describes one written archive.
type result struct {
	Component string
	Path      string
	Reference string
	Digest    v1.Hash // of the image index
	Platforms []string
	Size      int64
}

// build compiles the binaries and writes one archive per component.
func build(ctx context.Context, o options) ([]result, error) {
	chart, err := readChart(o.Root)
	if err != nil {
		return nil, err
	}
	comps, err := selectComponents(o.Components)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "imagebuild-bin-")
	if err != nil {
		return nil, fmt.Errorf("imagebuild: temp dir: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	bins, err := buildBinaries(ctx, o, chart.AppVersion, comps, tmp)
	if err != nil {
		return nil, err
	}
	return assemble(o, chart, comps, bins)
}

func selectComponents(names []string) ([]component, error) {
	if len(names) == 0 {
		return components, nil
	}
	var out []component
	for _, n := range names {
		found := false
		for _, c := range components {
			if c.Name == n {
				out = append(out, c)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("imagebuild: unknown component %q (known: callbackd, operator)", n)
		}
	}
	return out, nil
}

// binaryKey names a built binary.
type binaryKey struct {
	Component string
	Platform  string // os/arch
}

// buildBinaries runs one `go build` per platform for every component: static (CGO_ENABLED=0),
// -trimpath, stripped, with the chart's appVersion stamped in.
func buildBinaries(ctx context.Context, o options, version string, comps []component, dir string) (map[binaryKey]string, error) {
	out := map[binaryKey]string{}
	for _, p := range o.Platforms {
		pdir := filepath.Join(dir, p.OS+"_"+p.Architecture)
		if err := os.MkdirAll(pdir, 0o755); err != nil {
			return nil, fmt.Errorf("imagebuild: %w", err)
		}
		args := []string{"build", "-trimpath", "-ldflags", "-s -w -X " + versionVar + "=" + version, "-o", pdir + string(filepath.Separator)}
		for _, c := range comps {
			args = append(args, "./cmd/"+c.Name)
		}
		start := time.Now()
		cmd := exec.CommandContext(ctx, "go", args...)
		// On cancellation the go command is interrupted (it stops its compilers) before it is killed.
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		cmd.WaitDelay = 15 * time.Second
		cmd.Dir = o.Root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
		if p.Variant != "" && p.Architecture == "arm" {
			cmd.Env = append(cmd.Env, "GOARM="+strings.TrimPrefix(p.Variant, "v"))
		}
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stderr, &stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("imagebuild: go %s for %s: %w\n%s", strings.Join(args, " "), p, err, stderr.String())
		}
		logf(o.Log, "built %d binaries for %s in %s", len(comps), p, time.Since(start).Round(100*time.Millisecond))
		for _, c := range comps {
			out[binaryKey{c.Name, p.OS + "/" + p.Architecture}] = filepath.Join(pdir, c.Name)
		}
	}
	return out, nil
}

// assemble writes the archives from already built binaries.
func assemble(o options, chart chartImages, comps []component, bins map[binaryKey]string) ([]result, error) {
	ca, err := readCABundle(o.CABundle)
	if err != nil {
		return nil, err
	}
	base, err := newLayer(baseFiles(ca), o.Created)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("imagebuild: %w", err)
	}
	var results []result
	for _, c := range comps {
		ref := chart.Repositories[c.Name] + ":" + chart.AppVersion
		labels := map[string]string{
			labelSource:      chart.Home,
			labelVersion:     chart.AppVersion,
			labelRevision:    o.Revision,
			labelCreated:     o.Created.UTC().Format(time.RFC3339),
			labelTitle:       c.Name,
			labelDescription: c.Description,
		}
		idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
		var images []v1.Image
		var plats []string
		for _, p := range o.Platforms {
			binPath, ok := bins[binaryKey{c.Name, p.OS + "/" + p.Architecture}]
			if !ok {
				return nil, fmt.Errorf("imagebuild: no %s binary for %s", c.Name, p)
			}
			img, err := image(c, p, binPath, base, labels, o.Created)
			if err != nil {
				return nil, err
			}
			images = append(images, img)
			plats = append(plats, p.String())
			pc := p
			idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &pc}})
		}
		idx, ok := mutate.Annotations(idx, labels).(v1.ImageIndex)
		if !ok {
			return nil, fmt.Errorf("imagebuild: annotated index is not an index")
		}
		dst := filepath.Join(o.OutDir, c.Name+".tar")
		if err := writeArchive(dst, idx, images[0], ref, chart.AppVersion, o.Created); err != nil {
			return nil, err
		}
		d, err := idx.Digest()
		if err != nil {
			return nil, fmt.Errorf("imagebuild: index digest: %w", err)
		}
		st, err := os.Stat(dst)
		if err != nil {
			return nil, fmt.Errorf("imagebuild: %w", err)
		}
		results = append(results, result{Component: c.Name, Path: dst, Reference: ref, Digest: d, Platforms: plats, Size: st.Size()})
		logf(o.Log, "wrote %s: %s@%s (%s, %.1f MB)", dst, ref, d, strings.Join(plats, ", "), float64(st.Size())/1e6)
	}
	return results, nil
}

// image is one platform's image: the shared base layer, the binary layer, and a config with the
// binary as entrypoint, the non-root user and the labels.
func image(c component, p v1.Platform, binPath string, base v1.Layer, labels map[string]string, created time.Time) (v1.Image, error) {
	bin, err := os.ReadFile(binPath)
	if err != nil {
		return nil, fmt.Errorf("imagebuild: read %s binary: %w", c.Name, err)
	}
	top, err := newLayer(binaryFiles(c.Name, bin), created)
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{
			Created: v1.Time{Time: created}, CreatedBy: "imagebuild: static base (passwd, group, nsswitch.conf, CA certificates, /tmp)",
		}},
		mutate.Addendum{Layer: top, MediaType: types.OCILayer, History: v1.History{
			Created: v1.Time{Time: created}, CreatedBy: "imagebuild: " + path.Join(binDir, c.Name) + " (CGO_ENABLED=0 go build -trimpath ./cmd/" + c.Name + ")",
		}},
	)
	if err != nil {
		return nil, fmt.Errorf("imagebuild: append layers: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("imagebuild: config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Created = v1.Time{Time: created}
	cf.Config = v1.Config{
		Entrypoint: []string{path.Join(binDir, c.Name)},
		User:       fmt.Sprintf("%d:%d", nonRootUID, nonRootUID),
		WorkingDir: "/",
		Env:        []string{"PATH=" + binDir},
		Labels:     labels,
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("imagebuild: set config: %w", err)
	}
	return img, nil
}

// dockerManifest is one entry of a docker-save manifest.json.
type dockerManifest struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}

// writeArchive writes an OCI image layout holding idx (index.json names it ref, as `docker save`
// and BuildKit's OCI exporter do) plus a docker-save manifest.json for the first platform's image,
// all in one tar. Docker, Podman, containerd (`ctr import`), skopeo (oci-archive:) and crane
// (the first platform) load it. The tar is written to a temporary name and renamed when done.
func writeArchive(dst string, idx v1.ImageIndex, first v1.Image, ref, tag string, created time.Time) error {
	dir, err := os.MkdirTemp(filepath.Dir(dst), ".layout-")
	if err != nil {
		return fmt.Errorf("imagebuild: temp dir: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("imagebuild: OCI layout: %w", err)
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{annotationRef: tag, annotationImageName: ref})); err != nil {
		return fmt.Errorf("imagebuild: write index: %w", err)
	}
	dm, err := dockerManifestFor(first, ref)
	if err != nil {
		return err
	}
	b, err := json.Marshal([]dockerManifest{dm})
	if err != nil {
		return fmt.Errorf("imagebuild: manifest.json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), b, 0o644); err != nil {
		return fmt.Errorf("imagebuild: manifest.json: %w", err)
	}
	tmp := dst + ".tmp"
	if err := tarDir(dir, tmp, created); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	return nil
}

func dockerManifestFor(img v1.Image, ref string) (dockerManifest, error) {
	m, err := img.Manifest()
	if err != nil {
		return dockerManifest{}, fmt.Errorf("imagebuild: manifest: %w", err)
	}
	dm := dockerManifest{Config: blobPath(m.Config.Digest), RepoTags: []string{ref}}
	for _, l := range m.Layers {
		dm.Layers = append(dm.Layers, blobPath(l.Digest))
	}
	return dm, nil
}

func blobPath(h v1.Hash) string { return path.Join("blobs", h.Algorithm, h.Hex) }

// tarDir writes dir's regular files and folders into a tar at dst, sorted, with fixed times and
// owners (a reproducible archive).
func tarDir(dir, dst string, modTime time.Time) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			names = append(names, p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("imagebuild: walk %s: %w", dir, err)
	}
	sort.Strings(names)
	f, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	tw := tar.NewWriter(f)
	for _, p := range names {
		if err := tarEntry(tw, dir, p, modTime); err != nil {
			_ = f.Close()
			return err
		}
	}
	if err := tw.Close(); err != nil {
		_ = f.Close()
		return fmt.Errorf("imagebuild: close %s: %w", dst, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("imagebuild: close %s: %w", dst, err)
	}
	return nil
}

func tarEntry(tw *tar.Writer, dir, p string, modTime time.Time) error {
	st, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	rel, err := filepath.Rel(dir, p)
	if err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: modTime, Mode: 0o644, Format: tar.FormatPAX}
	if st.IsDir() {
		h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
		return tw.WriteHeader(h)
	}
	h.Typeflag, h.Size = tar.TypeReg, st.Size()
	if err := tw.WriteHeader(h); err != nil {
		return fmt.Errorf("imagebuild: tar %s: %w", rel, err)
	}
	src, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	defer func() { _ = src.Close() }()
	if _, err := io.Copy(tw, src); err != nil {
		return fmt.Errorf("imagebuild: tar %s: %w", rel, err)
	}
	return nil
}

func logf(w io.Writer, format string, args ...any) {
	if w != nil {
		_, _ = fmt.Fprintf(w, "imagebuild: "+format+"\n", args...)
	}
}

package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's user: the same numeric user and group as distroless's "nonroot", which is also what
// the chart's podSecurityContext and the operator's callbackd pods run as.
const (
	nonRootUID  = 65532
	nonRootName = "nonroot"
	// binDir holds the one binary; the entrypoint is binDir/<component>.
	binDir = "/usr/local/bin"
	// caBundlePath is where Go's crypto/x509 looks first on Linux, so callbackd's HTTPS calls to the
	// providers' query APIs trust the same roots as the build machine's Debian bundle.
	caBundlePath = "/etc/ssl/certs/ca-certificates.crt"
)

// file is one entry of a layer.
type file struct {
	Name string // absolute path in the image
	Mode int64  // permission bits (and the sticky bit)
	UID  int
	Dir  bool
	Data []byte
}

// baseFiles are the files every image shares (the "static" base: users, name service switch, CA
// certificates, /tmp and the user's home). No shell, no package manager, nothing executable.
func baseFiles(caBundle []byte) []file {
	return []file{
		{Name: "/etc", Mode: 0o755, Dir: true},
		{Name: "/etc/passwd", Mode: 0o644, Data: []byte(
			"root:x:0:0:root:/root:/sbin/nologin\n" +
				fmt.Sprintf("%s:x:%d:%d:%s:/home/%s:/sbin/nologin\n", nonRootName, nonRootUID, nonRootUID, nonRootName, nonRootName))},
		{Name: "/etc/group", Mode: 0o644, Data: []byte(
			"root:x:0:\n" + fmt.Sprintf("%s:x:%d:\n", nonRootName, nonRootUID))},
		{Name: "/etc/nsswitch.conf", Mode: 0o644, Data: []byte("hosts: files dns\n")},
		{Name: "/etc/ssl", Mode: 0o755, Dir: true},
		{Name: "/etc/ssl/certs", Mode: 0o755, Dir: true},
		{Name: caBundlePath, Mode: 0o644, Data: caBundle},
		{Name: "/home", Mode: 0o755, Dir: true},
		{Name: "/home/" + nonRootName, Mode: 0o700, UID: nonRootUID, Dir: true},
		{Name: "/tmp", Mode: 0o1777, Dir: true},
	}
}

// binaryFiles is the layer holding the component's binary, owned by root so that the running
// user cannot replace it.
func binaryFiles(name string, binary []byte) []file {
	return []file{
		{Name: "/usr", Mode: 0o755, Dir: true},
		{Name: "/usr/local", Mode: 0o755, Dir: true},
		{Name: binDir, Mode: 0o755, Dir: true},
		{Name: path.Join(binDir, name), Mode: 0o755, Data: binary},
	}
}

// layerTar writes files as an uncompressed tar, sorted by name, every entry stamped with
// modTime and numeric owners only, so that the same inputs give the same bytes (and digest).
func layerTar(files []file, modTime time.Time) ([]byte, error) {
	sorted := append([]file(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range sorted {
		h := &tar.Header{
			Name:    f.Name[1:], // relative, as in docker save and distroless layers
			Mode:    f.Mode,
			Uid:     f.UID,
			Gid:     f.UID,
			ModTime: modTime,
			Format:  tar.FormatPAX,
		}
		if f.Dir {
			h.Typeflag = tar.TypeDir
			h.Name += "/"
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("imagebuild: tar header %s: %w", f.Name, err)
		}
		if !f.Dir {
			if _, err := tw.Write(f.Data); err != nil {
				return nil, fmt.Errorf("imagebuild: tar %s: %w", f.Name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("imagebuild: close tar: %w", err)
	}
	return buf.Bytes(), nil
}

// newLayer turns files into a gzip-compressed OCI layer.
func newLayer(files []file, modTime time.Time) (v1.Layer, error) {
	b, err := layerTar(files, modTime)
	if err != nil {
		return nil, err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("imagebuild: layer: %w", err)
	}
	return l, nil
}

// readCABundle reads the system's CA bundle, failing with how to get one.
func readCABundle(p string) ([]byte, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("imagebuild: CA bundle (install it with `apt-get install ca-certificates`, or pass --ca-bundle): %w", err)
	}
	if !bytes.Contains(b, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, fmt.Errorf("imagebuild: CA bundle %s holds no PEM certificate", p)
	}
	return b, nil
}

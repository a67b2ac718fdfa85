// Command imagebuild builds the OCI images of callbackd and the operator without a container
// engine: static Go binaries (CGO_ENABLED=0, -trimpath) on an empty base that holds only
// /etc/passwd and /etc/group (user nonroot, 65532), the system's CA certificates and /tmp; no
// shell. Each image is a multi-platform index written as one tar under the output folder
// (an OCI image layout plus a docker-save manifest.json for the first platform), named and
// tagged as the Helm chart deploys it by default: the repositories come from the chart's
// values.yaml and the tag from Chart.yaml's appVersion.
//
//	go run ./hack/imagebuild --out dist/images --platforms linux/amd64,linux/arm64
//
// `make images` runs it. Builds are reproducible: the timestamps come from SOURCE_DATE_EPOCH or
// else the last commit, so the same commit gives the same digests.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fl := flag.NewFlagSet("imagebuild", flag.ContinueOnError)
	var (
		root      = fl.String("root", ".", "repository root (holds go.mod and charts/callback-platform)")
		out       = fl.String("out", "dist/images", "output folder for <component>.tar")
		platforms = fl.String("platforms", "linux/amd64,linux/arm64", "comma-separated platforms of each image's index; the first also goes into manifest.json")
		comps     = fl.String("components", "", "comma-separated components (callbackd, operator); empty means all")
		caBundle  = fl.String("ca-bundle", caBundlePath, "PEM CA bundle copied into the images (Debian: the ca-certificates package)")
		revision  = fl.String("revision", "", "source revision label (default: git rev-parse HEAD)")
	)
	if err := fl.Parse(args); err != nil {
		return err
	}
	absRoot, err := filepath.Abs(*root)
	if err != nil {
		return fmt.Errorf("imagebuild: --root: %w", err)
	}
	plats, err := parsePlatforms(*platforms)
	if err != nil {
		return err
	}
	rev := *revision
	if rev == "" {
		if rev, err = git(ctx, absRoot, "rev-parse", "HEAD"); err != nil {
			return err
		}
	}
	created, err := sourceDate(ctx, absRoot)
	if err != nil {
		return err
	}
	var names []string
	if *comps != "" {
		names = strings.Split(*comps, ",")
	}
	_, err = build(ctx, options{
		Root: absRoot, OutDir: *out, Platforms: plats, Components: names,
		CABundle: *caBundle, Revision: rev, Created: created, Log: os.Stderr,
	})
	return err
}

// parsePlatforms parses "os/arch[/variant],...", Linux only (the binaries are Linux containers).
func parsePlatforms(s string) ([]v1.Platform, error) {
	var out []v1.Platform
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := v1.ParsePlatform(f)
		if err != nil {
			return nil, fmt.Errorf("imagebuild: platform %q: %w", f, err)
		}
		if p.OS != "linux" || p.Architecture == "" {
			return nil, fmt.Errorf("imagebuild: platform %q: want linux/<arch>", f)
		}
		out = append(out, *p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("imagebuild: no platform given")
	}
	return out, nil
}

// sourceDate is SOURCE_DATE_EPOCH when set, else the committer time of HEAD.
func sourceDate(ctx context.Context, root string) (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		var err error
		if s, err = git(ctx, root, "log", "-1", "--format=%ct"); err != nil {
			return time.Time{}, err
		}
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("imagebuild: source date %q: %w", s, err)
	}
	return time.Unix(sec, 0).UTC(), nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("imagebuild: git %s (pass --revision and SOURCE_DATE_EPOCH outside a git checkout): %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(b)), nil
}

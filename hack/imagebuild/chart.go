package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// chartDir is the Helm chart, relative to the repository root. Its Chart.yaml appVersion is the
// one place the image tag comes from, and its values.yaml holds the image repositories, so that
// what `make images` builds is exactly what the chart deploys by default.
const chartDir = "charts/callback-platform"

// chartImages is what the chart says about the images.
type chartImages struct {
	// AppVersion is Chart.yaml's appVersion: the tag of both images and the version stamped
	// into the binaries.
	AppVersion string
	// Home is Chart.yaml's home, used as the images' source label.
	Home string
	// Repositories maps a component (callbackd, operator) to its default image repository.
	Repositories map[string]string
}

// readChart reads Chart.yaml and values.yaml under root. A missing field is an error naming it,
// because an image built without a tag or repository would not match the chart.
func readChart(root string) (chartImages, error) {
	var meta struct {
		AppVersion string `json:"appVersion"`
		Home       string `json:"home"`
	}
	if err := readYAML(filepath.Join(root, chartDir, "Chart.yaml"), &meta); err != nil {
		return chartImages{}, err
	}
	var values struct {
		Image struct {
			Repository string `json:"repository"`
		} `json:"image"`
		CallbackdImage struct {
			Repository string `json:"repository"`
		} `json:"callbackdImage"`
	}
	if err := readYAML(filepath.Join(root, chartDir, "values.yaml"), &values); err != nil {
		return chartImages{}, err
	}
	c := chartImages{
		AppVersion: strings.TrimSpace(meta.AppVersion),
		Home:       strings.TrimSpace(meta.Home),
		Repositories: map[string]string{
			"operator":  strings.TrimSpace(values.Image.Repository),
			"callbackd": strings.TrimSpace(values.CallbackdImage.Repository),
		},
	}
	for field, v := range map[string]string{
		"Chart.yaml appVersion":                 c.AppVersion,
		"Chart.yaml home":                       c.Home,
		"values.yaml image.repository":          c.Repositories["operator"],
		"values.yaml callbackdImage.repository": c.Repositories["callbackd"],
	} {
		if v == "" {
			return chartImages{}, fmt.Errorf("imagebuild: %s is empty in %s", field, filepath.Join(root, chartDir))
		}
	}
	return c, nil
}

func readYAML(path string, into any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("imagebuild: read %s: %w", path, err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		return fmt.Errorf("imagebuild: parse %s: %w", path, err)
	}
	return nil
}

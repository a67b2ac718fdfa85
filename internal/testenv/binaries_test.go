package testenv_test

import (
	"strings"
	"testing"

	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

func TestMissingBinaryErrorsSayHowToInstall(t *testing.T) {
	cases := []struct {
		name     string
		env      map[string]string
		start    func() error
		wantHint string
	}{
		{
			name:     "redis-server",
			env:      map[string]string{testenv.EnvRedisServer: "/nonexistent/redis-server"},
			start:    func() error { g, err := testenv.NewRedis(testenv.RedisOptions{}); closeIf(g, err); return err },
			wantHint: "run hack/deps.sh (or: apt-get install postgresql redis-server)",
		},
		{
			name:     "postgres",
			env:      map[string]string{testenv.EnvPGBin: "/nonexistent"},
			start:    func() error { p, err := testenv.NewPostgres(); closeIf(p, err); return err },
			wantHint: "run hack/deps.sh (or: apt-get install postgresql redis-server)",
		},
		{
			name:     "KUBEBUILDER_ASSETS empty",
			env:      map[string]string{testenv.EnvKubebuilderAssets: ""},
			start:    func() error { e, err := testenv.NewEnvtest(); closeIf(e, err); return err },
			wantHint: "run `make k8s-binaries` (hack/k8s-binaries.sh envtest) and export KUBEBUILDER_ASSETS=<printed folder>",
		},
		{
			name:     "KUBEBUILDER_ASSETS without binaries",
			env:      map[string]string{testenv.EnvKubebuilderAssets: "/nonexistent"},
			start:    func() error { e, err := testenv.NewEnvtest(); closeIf(e, err); return err },
			wantHint: "run `make k8s-binaries`",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			err := c.start()
			if err == nil || !strings.Contains(err.Error(), c.wantHint) {
				t.Fatalf("start with %v: expected an error containing %q, got %v", c.env, c.wantHint, err)
			}
		})
	}
}

type closer interface{ Close() error }

// closeIf closes a server that started although the test expected it not to.
func closeIf(c closer, err error) {
	if err == nil {
		_ = c.Close()
	}
}

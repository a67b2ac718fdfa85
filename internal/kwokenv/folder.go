package kwokenv

import (
	"fmt"

	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// newFolder creates a folder under testenv's root with testenv's owner file, so that testenv's
// reaper and hack/check-leftovers.sh treat the cluster (every kwokctl component names its work
// folder on its command line) like any other server folder of this test binary.
func newFolder() (string, error) {
	dir, err := testenv.NewOwnedDir()
	if err != nil {
		return "", fmt.Errorf("kwokenv: cluster folder: %w", err)
	}
	return dir, nil
}

// removeFolder kills every process still naming dir and removes it.
func removeFolder(dir string) error {
	if err := testenv.RemoveOwnedDir(dir); err != nil {
		return fmt.Errorf("kwokenv: %w", err)
	}
	return nil
}

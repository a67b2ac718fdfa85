package faults

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The negative-control switches and the Redis address map must not exist in the normal binary:
// their files are compiled only with the faultinject build tag.
func TestFaultInjectionOnlyUnderBuildTag(t *testing.T) {
	for _, tc := range []struct{ pkg, file string }{
		{"github.com/seed-1cff2221/callback-platform/callbackd/store", "faultinject.go"},
		{"github.com/seed-1cff2221/callback-platform/callbackd/gate", "faultinject.go"},
	} {
		files := func(tags string) []string {
			out, err := exec.Command(goTool(), "list", "-tags", tags, "-f", "{{join .GoFiles \" \"}}", tc.pkg).Output()
			if err != nil {
				t.Fatalf("go list %s (tags %q): %v", tc.pkg, tags, err)
			}
			return strings.Fields(string(out))
		}
		if got := files(""); slices.Contains(got, tc.file) {
			t.Errorf("%s: expected %s to be left out of the normal build, it is compiled: %v", tc.pkg, tc.file, got)
		}
		if got := files("faultinject"); !slices.Contains(got, tc.file) {
			t.Errorf("%s: expected %s in the faultinject build, got %v", tc.pkg, tc.file, got)
		}
	}
}

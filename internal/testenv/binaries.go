package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Environment variables that override where binaries are found.
const (
	// EnvPGBin names the folder holding PostgreSQL's initdb and postgres.
	EnvPGBin = "TESTENV_PG_BIN"
	// EnvRedisServer names the redis-server binary.
	EnvRedisServer = "TESTENV_REDIS_SERVER"
	// EnvPGUser names the unprivileged OS user that runs PostgreSQL when the tests run as root
	// (default "postgres").
	EnvPGUser = "TESTENV_PG_USER"
	// EnvKubebuilderAssets names the folder holding kube-apiserver and etcd.
	EnvKubebuilderAssets = "KUBEBUILDER_ASSETS"
)

// installHint is appended to every "binary missing" error.
const installHint = "run hack/deps.sh (or: apt-get install postgresql redis-server)"

// errMissingBinary marks errors about binaries that are not installed.
var errMissingBinary = errors.New("testenv: server binary not found")

// findPGBin returns the folder holding initdb and postgres: $TESTENV_PG_BIN, else the folder of
// the postgres found on PATH (symlinks resolved, so initdb comes from the same installation),
// else the newest /usr/lib/postgresql/<major>/bin.
func findPGBin() (string, error) {
	if dir := os.Getenv(EnvPGBin); dir != "" {
		if err := hasPGBinaries(dir); err != nil {
			return "", fmt.Errorf("%w: %s=%s: %w; %s", errMissingBinary, EnvPGBin, dir, err, installHint)
		}
		return dir, nil
	}
	if path, err := exec.LookPath("postgres"); err == nil {
		if real, err := filepath.EvalSymlinks(path); err == nil {
			path = real
		}
		if dir := filepath.Dir(path); hasPGBinaries(dir) == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, dir := range dirs {
		if hasPGBinaries(dir) == nil {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%w: PostgreSQL's initdb and postgres are not on PATH nor under /usr/lib/postgresql/*/bin; %s",
		errMissingBinary, installHint)
}

// pgMajor extracts the major version from /usr/lib/postgresql/<major>/bin (0 when unknown).
func pgMajor(binDir string) int {
	n, err := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	if err != nil {
		return 0
	}
	return n
}

// hasPGBinaries checks that dir holds executable initdb and postgres.
func hasPGBinaries(dir string) error {
	for _, name := range []string{"initdb", "postgres"} {
		if err := isExecutable(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// findRedisServer returns the redis-server binary: $TESTENV_REDIS_SERVER, else PATH, else the
// Debian location.
func findRedisServer() (string, error) {
	if path := os.Getenv(EnvRedisServer); path != "" {
		if err := isExecutable(path); err != nil {
			return "", fmt.Errorf("%w: %s=%s: %w; %s", errMissingBinary, EnvRedisServer, path, err, installHint)
		}
		return path, nil
	}
	if path, err := exec.LookPath("redis-server"); err == nil {
		return path, nil
	}
	if isExecutable("/usr/bin/redis-server") == nil {
		return "/usr/bin/redis-server", nil
	}
	return "", fmt.Errorf("%w: redis-server is not on PATH; %s", errMissingBinary, installHint)
}

// isExecutable checks that path is a regular file with an execute bit.
func isExecutable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// pgCredential returns the credentials PostgreSQL runs under. PostgreSQL refuses to run as root,
// so a root test binary runs it as $TESTENV_PG_USER (default "postgres", the user Debian's
// package creates; hack/deps.sh makes sure it exists). Nil means "as ourselves".
func pgCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	name := os.Getenv(EnvPGUser)
	if name == "" {
		name = "postgres"
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("%w: PostgreSQL cannot run as root and the OS user %q to run it as does not exist: %w; run hack/deps.sh (it creates the user)",
			errMissingBinary, name, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("testenv: uid of %q: %w", name, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("testenv: gid of %q: %w", name, err)
	}
	if uid == 0 {
		return nil, fmt.Errorf("testenv: %s=%s is root; PostgreSQL needs an unprivileged user", EnvPGUser, name)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// binaryVersion runs "<path> --version" and returns the first token that looks like a version
// ("15.20" from "postgres (PostgreSQL) 15.20 (Debian ...)", "7.0.15" from "... v=7.0.15 ...").
func binaryVersion(path string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return "unknown"
	}
	for _, f := range strings.Fields(string(out)) {
		f = strings.TrimPrefix(f, "v=")
		if f != "" && f[0] >= '0' && f[0] <= '9' && strings.Contains(f, ".") {
			return f
		}
	}
	return "unknown"
}

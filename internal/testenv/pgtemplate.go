package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// EnvPGTemplate set to "off" makes every PostgreSQL server run its own initdb instead of copying
// a cached, freshly initdb'd cluster.
const EnvPGTemplate = "TESTENV_PG_TEMPLATE"

// templateComplete marks a template folder whose initdb finished.
const templateComplete = ".testenv-template-complete"

// initdbArgs are the cluster-shaping initdb arguments (besides --pgdata): trust authentication
// (loopback only), UTF-8, C locale, superuser "postgres". --no-sync only skips initdb's own
// final fsync; the server itself runs with fsync on.
var initdbArgs = []string{
	"--username=" + pgSuperuser, "--auth=trust", "--encoding=UTF8", "--locale=C",
	"--no-sync", "--no-instructions",
}

// makeCluster fills p.dataDir with a new cluster: a copy of the cached template for this
// PostgreSQL build when there is one (initdb costs seconds of CPU on every server start; a copy
// is cheaper), else a fresh initdb, which then becomes the template for later servers.
func (p *Postgres) makeCluster() error {
	tmpl := ""
	if os.Getenv(EnvPGTemplate) != "off" {
		tmpl = p.templatePath()
	}
	if tmpl != "" {
		if _, err := os.Stat(filepath.Join(tmpl, templateComplete)); err == nil {
			if err := copyTree(tmpl, p.dataDir, p.cred); err == nil {
				return nil
			}
			// A failed copy falls back to initdb on a clean folder.
			if err := os.RemoveAll(p.dataDir); err != nil {
				return fmt.Errorf("testenv: clean data folder after a failed template copy: %w", err)
			}
			if err := p.mkdirOwned(p.dataDir); err != nil {
				return err
			}
		}
	}
	if err := p.initdb(); err != nil {
		return err
	}
	if tmpl != "" {
		saveTemplate(p.dataDir, tmpl) // best effort: the next server benefits, this one needs nothing
	}
	return nil
}

// templatePath returns where the template cluster for this PostgreSQL build, server user and
// initdb arguments is cached ("" when there is no user cache folder).
func (p *Postgres) templatePath() string {
	cache, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(p.binDir, "postgres"), "--version").Output()
	if err != nil {
		return ""
	}
	uid := os.Getuid()
	if p.cred != nil {
		uid = int(p.cred.Uid)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%d\n%s\n", p.binDir, out, uid, strings.Join(initdbArgs, " "))
	return filepath.Join(cache, "callback-platform", "testenv",
		"pgdata-"+p.version+"-"+hex.EncodeToString(h.Sum(nil))[:16])
}

// saveTemplate copies a freshly initdb'd, never started cluster to final. Concurrent test
// binaries may race; each copies into its own work folder and renames it into place, and a
// loser's copy is discarded.
func saveTemplate(dataDir, final string) {
	base := filepath.Dir(final)
	if err := os.MkdirAll(base, 0o755); err != nil {
		return
	}
	removeStaleWork(base)
	work, err := os.MkdirTemp(base, "building-")
	if err != nil {
		return
	}
	defer os.RemoveAll(work)
	staged := filepath.Join(work, "pgdata")
	if err := os.Mkdir(staged, 0o700); err != nil {
		return
	}
	if err := copyTree(dataDir, staged, nil); err != nil {
		return
	}
	if err := os.WriteFile(filepath.Join(staged, templateComplete), nil, 0o600); err != nil {
		return
	}
	_ = os.Rename(staged, final) // fails harmlessly when another binary installed one first
}

// removeStaleWork removes work folders that a killed test binary left in the template cache.
func removeStaleWork(base string) {
	stale, _ := filepath.Glob(filepath.Join(base, "building-*"))
	for _, dir := range stale {
		if st, err := os.Stat(dir); err == nil && time.Since(st.ModTime()) > time.Hour {
			_ = os.RemoveAll(dir)
		}
	}
}

// mkdirOwned creates dir (mode 0700) owned by the server user.
func (p *Postgres) mkdirOwned(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("testenv: create %s: %w", dir, err)
	}
	if p.cred != nil {
		if err := os.Chown(dir, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
			return fmt.Errorf("testenv: chown %s: %w", dir, err)
		}
	}
	return nil
}

// copyTree copies the template cluster src into the existing, empty folder dst, keeping modes
// and giving everything to cred's user (nil: ourselves). The completion marker is not copied.
func copyTree(src, dst string, cred *syscall.Credential) error {
	chown := func(path string) error {
		if cred == nil {
			return nil
		}
		return os.Lchown(path, int(cred.Uid), int(cred.Gid))
	}
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if rel == "." || rel == templateComplete {
			return nil
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(target, info.Mode().Perm()); err != nil {
				return err
			}
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
		case d.Type().IsRegular():
			if err := copyFile(path, target, info.Mode().Perm()); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unexpected file type %v at %s", d.Type(), path)
		}
		return chown(target)
	})
	if err != nil {
		return fmt.Errorf("testenv: copy template cluster: %w", err)
	}
	return nil
}

func copyFile(src, dst string, perm fs.FileMode) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, out.Close()) }()
	_, err = io.Copy(out, in)
	return err
}

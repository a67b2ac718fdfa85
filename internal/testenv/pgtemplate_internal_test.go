package testenv

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestTemplateClusterServesLikeInitdb checks that a server made from the cached template and one
// made by initdb are interchangeable, and that the template is actually used.
func TestTemplateClusterServesLikeInitdb(t *testing.T) {
	cases := []struct {
		name       string
		template   string
		wantInitdb bool
	}{
		{name: "template off: initdb", template: "off", wantInitdb: true},
		// The previous case (or an earlier run) left a template in the cache.
		{name: "template on: copy", template: "", wantInitdb: false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(EnvPGTemplate, c.template)
			if c.template != "off" {
				if err := saveTemplateForTest(t); err != nil {
					t.Fatal(err)
				}
			}
			pg := StartPostgres(t)
			_, err := os.Stat(filepath.Join(pg.dir, "initdb.log"))
			if ranInitdb := err == nil; ranInitdb != c.wantInitdb {
				t.Errorf("initdb ran: expected %v, got %v", c.wantInitdb, ranInitdb)
			}
			if _, err := os.Stat(filepath.Join(pg.dataDir, templateComplete)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("template marker in the server's data folder: expected none, got stat error %v", err)
			}
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, pg.DSN())
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			defer conn.Close(ctx)
			var enc, user string
			if err := conn.QueryRow(ctx, "SELECT current_setting('server_encoding'), current_user").Scan(&enc, &user); err != nil {
				t.Fatalf("query: %v", err)
			}
			if enc != "UTF8" || user != "postgres" {
				t.Errorf("cluster: expected UTF8 and user postgres, got %s and %s", enc, user)
			}
		})
	}
}

// saveTemplateForTest makes sure the template cache holds a cluster for the installed build.
func saveTemplateForTest(t *testing.T) error {
	t.Helper()
	if tmpl := (&Postgres{binDir: mustPGBin(t), version: binaryVersion(filepath.Join(mustPGBin(t), "postgres"))}).templatePath(); tmpl != "" {
		if _, err := os.Stat(filepath.Join(tmpl, templateComplete)); err == nil {
			return nil
		}
	}
	p, err := NewPostgres() // creates the template on first use
	if err != nil {
		return err
	}
	return p.Close()
}

func mustPGBin(t *testing.T) string {
	t.Helper()
	dir, err := findPGBin()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

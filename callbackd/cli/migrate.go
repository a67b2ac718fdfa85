package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/store"
)

func newMigrateCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		configPath string
		dsn        string
		logLevel   string
		timeout    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the embedded database migrations (safe to run concurrently)",
		Long: "migrate applies the schema migrations embedded in this binary, forward only, under a " +
			"PostgreSQL advisory lock, so several replicas or Jobs may run it at once. The database is " +
			"named by --dsn, by the config file's database section (--config), or by " + config.EnvDatabaseDSN + ".",
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := newLogger(stderr, logLevel)
			if err != nil {
				return err
			}
			target, err := migrateDSN(configPath, dsn)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			applied, err := store.Migrate(ctx, target, logger)
			if err != nil {
				return fmt.Errorf("migrate: %w", err)
			}
			versions := make([]string, len(applied))
			for i, v := range applied {
				versions[i] = fmt.Sprint(v)
			}
			logger.Info("migrations applied", "applied", len(applied), "versions", strings.Join(versions, ","),
				"schema_version", store.LatestSchemaVersion())
			_, err = fmt.Fprintf(stdout, "migrate: %d migration(s) applied; schema at version %d\n",
				len(applied), store.LatestSchemaVersion())
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "callbackd configuration file (YAML or JSON); its database section is used")
	f.StringVar(&dsn, "dsn", "", "PostgreSQL connection string (prefer "+config.EnvDatabaseDSN+": flags show up in process lists)")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.DurationVar(&timeout, "timeout", 5*time.Minute, "give up after this long (waiting for another runner's lock included)")
	return cmd
}

// migrateDSN picks the database to migrate: --dsn, else the config file (with its environment
// overrides), else CALLBACKD_DATABASE_DSN.
func migrateDSN(configPath, dsn string) (string, error) {
	switch {
	case dsn != "" && configPath != "":
		return "", &usageError{errors.New("migrate: --config and --dsn exclude each other")}
	case dsn != "":
		return dsn, nil
	case configPath != "":
		f, err := config.Load(configPath)
		if err != nil {
			return "", err
		}
		return f.Database.ResolveDSN()
	default:
		if env := strings.TrimSpace(os.Getenv(config.EnvDatabaseDSN)); env != "" {
			return env, nil
		}
		return "", &usageError{errors.New("migrate: name the database with --config, --dsn or " + config.EnvDatabaseDSN)}
	}
}

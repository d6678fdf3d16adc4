package devstack

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/lib/pq"
	"go.temporal.io/server/common/config"
	tlog "go.temporal.io/server/common/log"
	"go.temporal.io/server/common/metrics"
	"go.temporal.io/server/common/persistence"
	"go.temporal.io/server/common/persistence/sql"
	"go.temporal.io/server/common/persistence/sql/sqlplugin"
	pgplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/postgresql"
	"go.temporal.io/server/common/resolver"
	"go.temporal.io/server/schema"
	pgschema "go.temporal.io/server/schema/postgresql/v12"

	"github.com/toolfleet/toolfleet/internal/loopback"
)

// PostgresStore is a PostgreSQL server that holds Temporal's two stores: the
// default one (workflows, history, task queues) and visibility (the lists and
// counts of workflows), each in its own database, as production deployments
// run them. The databases and Temporal's schema are created when missing.
type PostgresStore struct {
	// Address is host:port.
	Address string
	// User must be allowed to create databases the first time. Default "postgres".
	User     string
	Password string
	// Database is the default store's database. Default "temporal".
	Database string
	// VisibilityDatabase is the visibility store's database. Default "temporal_visibility".
	VisibilityDatabase string
	// ConnectAttributes are passed to the driver, e.g. sslmode=disable.
	ConnectAttributes map[string]string
}

// ParsePostgres reads a PostgreSQL server as a URL
// (postgres://user:password@host:port/database?sslmode=disable) or as a bare
// host:port. The URL's database names the default store; visibility goes to
// the same name with a "_visibility" suffix. Without sslmode, a loopback server
// is dialled without TLS.
func ParsePostgres(s string) (*PostgresStore, error) {
	if !strings.Contains(s, "://") {
		host, port, err := net.SplitHostPort(s)
		if err != nil || host == "" || port == "" || strings.Contains(host, "@") {
			// Not quoted back: it may hold a password.
			return nil, errors.New("devstack: postgres server: want host:port or postgres://user@host:port/database")
		}
		return withDefaults(&PostgresStore{Address: s}), nil
	}
	u, err := url.Parse(s)
	if err != nil { // url's error quotes the URL, password included
		return nil, errors.New("devstack: postgres URL: malformed")
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return nil, fmt.Errorf("devstack: postgres URL: scheme %q, want postgres", u.Scheme)
	}
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), "5432")
	}
	if u.Hostname() == "" {
		return nil, errors.New("devstack: postgres URL: no host")
	}
	st := &PostgresStore{Address: u.Host, User: u.User.Username()}
	st.Password, _ = u.User.Password()
	if db := strings.TrimPrefix(u.Path, "/"); db != "" {
		st.Database, st.VisibilityDatabase = db, db+"_visibility"
	}
	for k, v := range u.Query() {
		if st.ConnectAttributes == nil {
			st.ConnectAttributes = map[string]string{}
		}
		st.ConnectAttributes[k] = v[len(v)-1]
	}
	return withDefaults(st), nil
}

func withDefaults(st *PostgresStore) *PostgresStore {
	if st.User == "" {
		st.User = "postgres"
	}
	if st.Database == "" {
		st.Database = "temporal"
	}
	if st.VisibilityDatabase == "" {
		st.VisibilityDatabase = "temporal_visibility"
	}
	if _, ok := st.ConnectAttributes["sslmode"]; !ok {
		if host, _, err := net.SplitHostPort(st.Address); err == nil && loopback.Host(host) {
			if st.ConnectAttributes == nil {
				st.ConnectAttributes = map[string]string{}
			}
			st.ConnectAttributes["sslmode"] = "disable"
		}
	}
	return st
}

// sqlConfigs are the server's default and visibility store configurations.
func (st *PostgresStore) sqlConfigs() (def, vis *config.SQL) {
	mk := func(db string) *config.SQL {
		attrs := make(map[string]string, len(st.ConnectAttributes))
		for k, v := range st.ConnectAttributes {
			attrs[k] = v
		}
		// The pool of Temporal's own development-postgres12 configuration.
		return &config.SQL{
			PluginName:        pgplugin.PluginName,
			ConnectProtocol:   "tcp",
			ConnectAddr:       st.Address,
			User:              st.User,
			Password:          st.Password,
			DatabaseName:      db,
			ConnectAttributes: attrs,
			MaxConns:          20,
			MaxIdleConns:      20,
			MaxConnLifetime:   time.Hour,
		}
	}
	return mk(st.Database), mk(st.VisibilityDatabase)
}

// prepare creates both databases, sets Temporal's schema up in them when
// they have none, and returns the stores' configurations. A database that has
// a schema is left as is: the server checks its version when it starts.
func (st *PostgresStore) prepare(logger tlog.Logger) (def, vis *config.SQL, err error) {
	def, vis = st.sqlConfigs()
	for _, s := range []struct {
		cfg        *config.SQL
		schemaFile string
		version    string
	}{
		{def, "postgresql/v12/temporal/schema.sql", pgschema.Version},
		{vis, "postgresql/v12/visibility/schema.sql", pgschema.VisibilityVersion},
	} {
		if err := createDatabase(*s.cfg, logger); err != nil {
			return nil, nil, err
		}
		if err := setUpSchema(s.cfg, s.schemaFile, s.version, logger); err != nil {
			return nil, nil, err
		}
	}
	return def, vis, nil
}

// createDatabase creates cfg's database unless it exists, connected to the
// server's "postgres" database.
func createDatabase(cfg config.SQL, logger tlog.Logger) error {
	name := cfg.DatabaseName
	cfg.DatabaseName = "postgres"
	db, err := sql.NewSQLAdminDB(sqlplugin.DbKindUnknown, &cfg, resolver.NewNoopResolver(), logger, metrics.NoopMetricsHandler)
	if err != nil {
		return fmt.Errorf("devstack: connect to postgres: %w", err)
	}
	defer func() { _ = db.Close() }()
	err = db.CreateDatabase(name)
	var pqErr *pq.Error
	if errors.As(err, &pqErr) && pqErr.Code == "42P04" { // duplicate_database
		return nil
	}
	if err != nil {
		return fmt.Errorf("devstack: create postgres database %q: %w", name, err)
	}
	return nil
}

// setUpSchema installs Temporal's embedded schema file (the current schema,
// which the versioned changes lead to) in a database without one and records
// its version as Temporal's schema tool does.
func setUpSchema(cfg *config.SQL, schemaFile, version string, logger tlog.Logger) error {
	db, err := sql.NewSQLAdminDB(sqlplugin.DbKindUnknown, cfg, resolver.NewNoopResolver(), logger, metrics.NoopMetricsHandler)
	if err != nil {
		return fmt.Errorf("devstack: connect to postgres database %q: %w", cfg.DatabaseName, err)
	}
	defer func() { _ = db.Close() }()
	if current, err := db.ReadSchemaVersion(cfg.DatabaseName); err == nil && current != "" {
		return nil
	}
	text, err := fs.ReadFile(schema.Assets(), schemaFile)
	if err != nil {
		return fmt.Errorf("devstack: temporal schema %s: %w", schemaFile, err)
	}
	stmts, err := persistence.LoadAndSplitQueryFromReaders([]io.Reader{bytes.NewReader(text)})
	if err != nil {
		return fmt.Errorf("devstack: temporal schema %s: %w", schemaFile, err)
	}
	if err := db.CreateSchemaVersionTables(); err != nil {
		return fmt.Errorf("devstack: schema version tables in %q: %w", cfg.DatabaseName, err)
	}
	for _, stmt := range stmts {
		if err := db.Exec(stmt); err != nil {
			return fmt.Errorf("devstack: temporal schema in %q: %w", cfg.DatabaseName, err)
		}
	}
	if err := db.UpdateSchemaVersion(cfg.DatabaseName, version, version); err != nil {
		return fmt.Errorf("devstack: schema version in %q: %w", cfg.DatabaseName, err)
	}
	if err := db.WriteSchemaUpdateLog("0", version, "", "initial version"); err != nil {
		return fmt.Errorf("devstack: schema update log in %q: %w", cfg.DatabaseName, err)
	}
	return nil
}

// DropDatabases drops both databases, for measurements that made a fresh
// pair. The server using them must be stopped first.
func (st *PostgresStore) DropDatabases() error {
	def, vis := st.sqlConfigs()
	cfg := *def
	cfg.DatabaseName = "postgres"
	db, err := sql.NewSQLAdminDB(sqlplugin.DbKindUnknown, &cfg, resolver.NewNoopResolver(), tlog.NewNoopLogger(), metrics.NoopMetricsHandler)
	if err != nil {
		return fmt.Errorf("devstack: connect to postgres: %w", err)
	}
	defer func() { _ = db.Close() }()
	var errs []error
	for _, name := range []string{def.DatabaseName, vis.DatabaseName} {
		if err := db.DropDatabase(name); err != nil {
			errs = append(errs, fmt.Errorf("devstack: drop postgres database %q: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

package devstack

import (
	"maps"
	"strings"
	"testing"

	pgplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/postgresql"
)

func TestParsePostgres(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want PostgresStore
	}{
		{"127.0.0.1:55432", PostgresStore{Address: "127.0.0.1:55432", User: "postgres", Database: "temporal",
			VisibilityDatabase: "temporal_visibility", ConnectAttributes: map[string]string{"sslmode": "disable"}}},
		{"db.internal:5432", PostgresStore{Address: "db.internal:5432", User: "postgres", Database: "temporal",
			VisibilityDatabase: "temporal_visibility"}},
		{"postgres://temporal:s3cret@localhost/tf", PostgresStore{Address: "localhost:5432", User: "temporal", Password: "s3cret",
			Database: "tf", VisibilityDatabase: "tf_visibility", ConnectAttributes: map[string]string{"sslmode": "disable"}}},
		{"postgresql://u@[::1]:6000?sslmode=require&application_name=bench", PostgresStore{Address: "[::1]:6000", User: "u",
			Database: "temporal", VisibilityDatabase: "temporal_visibility",
			ConnectAttributes: map[string]string{"sslmode": "require", "application_name": "bench"}}},
	} {
		got, err := ParsePostgres(tc.in)
		if err != nil {
			t.Fatalf("ParsePostgres(%q): %v", tc.in, err)
		}
		if got.Address != tc.want.Address || got.User != tc.want.User || got.Password != tc.want.Password ||
			got.Database != tc.want.Database || got.VisibilityDatabase != tc.want.VisibilityDatabase ||
			!maps.Equal(got.ConnectAttributes, tc.want.ConnectAttributes) {
			t.Errorf("ParsePostgres(%q) = %+v, want %+v", tc.in, *got, tc.want)
		}
	}
	for _, bad := range []string{"", "localhost", ":5432", "mysql://u@h:1/db", "postgres:///db", "postgres://u:s3cret@h%zz/db", "u:s3cret@h:5432"} {
		got, err := ParsePostgres(bad)
		if err == nil {
			t.Errorf("ParsePostgres(%q) = %+v, want an error", bad, *got)
		} else if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("ParsePostgres(%q): the error %q shows the password", bad, err)
		}
	}
}

// TestPostgresStores: both stores go through Temporal's postgres12 plugin,
// each to its own database, with a bounded pool and their own copy of the
// connect attributes.
func TestPostgresStores(t *testing.T) {
	t.Parallel()
	st, err := ParsePostgres("postgres://temporal@127.0.0.1:55432/tf")
	if err != nil {
		t.Fatal(err)
	}
	def, vis := st.sqlConfigs()
	for _, c := range []struct {
		name, db string
		got      string
		pool     int
		plugin   string
	}{
		{"default", "tf", def.DatabaseName, def.MaxConns, def.PluginName},
		{"visibility", "tf_visibility", vis.DatabaseName, vis.MaxConns, vis.PluginName},
	} {
		if c.got != c.db || c.plugin != pgplugin.PluginName || c.pool <= 0 {
			t.Errorf("%s store: database %q plugin %q pool %d, want %q %q bounded", c.name, c.got, c.plugin, c.pool, c.db, pgplugin.PluginName)
		}
	}
	if def.ConnectAddr != "127.0.0.1:55432" || def.User != "temporal" || def.ConnectAttributes["sslmode"] != "disable" {
		t.Errorf("default store = %+v", def)
	}
	def.ConnectAttributes["sslmode"] = "require"
	if vis.ConnectAttributes["sslmode"] != "disable" || st.ConnectAttributes["sslmode"] != "disable" {
		t.Error("the stores share their connect attributes")
	}
}

// Command jsonq serves the JSONQuery toolkit: jq queries over JSON documents.
//
//	go run ./workers/jsonq --listen 127.0.0.1:19102
//
// Besides the flags and environment of every worker (see sdk/tool.Main):
//
//	--query-memory  TOOLFLEET_JSONQ_QUERY_MEMORY  the most the reservations of the
//	                queries this process runs at once add up to, e.g. 2GiB; empty:
//	                three quarters of GOMEMLIMIT, else 2GiB; none: no ceiling
//
// The other limits are the defaults of jsonq.Config.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	jsonqv1 "github.com/toolfleet/toolfleet/gen/tools/jsonq/v1"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/workers/jsonq/jsonq"
)

// EnvQueryMemory is the default of --query-memory.
const EnvQueryMemory = "TOOLFLEET_JSONQ_QUERY_MEMORY"

func main() {
	var queryMemory string
	tool.MainWithFlags("jsonq", func(fs *flag.FlagSet) {
		fs.StringVar(&queryMemory, "query-memory", os.Getenv(EnvQueryMemory),
			"the most the memory reservations of the queries this process runs at once add up to, e.g. 2GiB; "+
				"a query waits for room until its deadline, one that can never fit is refused; "+
				"empty: three quarters of GOMEMLIMIT, else 2GiB; none: no ceiling (env "+EnvQueryMemory+"; docs/operations.md)")
	}, func(w *tool.Worker) error {
		n, err := parseQueryMemory(queryMemory)
		if err != nil {
			return err
		}
		jsonqv1.RegisterJSONQueryServiceServer(w, jsonq.New(jsonq.Config{QueryMemory: n}))
		return nil
	})
}

// parseQueryMemory reads --query-memory as jsonq.Config.QueryMemory: 0 for
// the default, -1 for none.
func parseQueryMemory(v string) (int64, error) {
	switch v = strings.TrimSpace(v); v {
	case "":
		return 0, nil
	case "none", "0":
		return -1, nil
	}
	n, err := jsassets.ParseBytes(v)
	if err != nil {
		return 0, fmt.Errorf("--query-memory (%s): %w", EnvQueryMemory, err)
	}
	return n, nil
}

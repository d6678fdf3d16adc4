// Command jsonq serves the JSONQuery toolkit: jq queries over JSON documents.
//
//	go run ./workers/jsonq --listen 127.0.0.1:19102
//
// Flags and environment are those of every worker (see sdk/tool.Main); the limits
// are the defaults of jsonq.Config.
package main

import (
	jsonqv1 "github.com/toolfleet/toolfleet/gen/tools/jsonq/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/workers/jsonq/jsonq"
)

func main() {
	tool.Main("jsonq", func(w *tool.Worker) error {
		jsonqv1.RegisterJSONQueryServiceServer(w, jsonq.New(jsonq.Config{}))
		return nil
	})
}

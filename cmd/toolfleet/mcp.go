package main

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolfleet/toolfleet/internal/config"
	"github.com/toolfleet/toolfleet/services/gateway/mcp"
)

func newMCPCommand() *cobra.Command {
	var gf gatewayFlags
	var logLevel string
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve a gateway's tools to an MCP client over stdin/stdout",
		Long: `mcp is a stdio bridge for MCP clients that launch a command (desktop apps,
IDEs, agent frameworks): it speaks the Model Context Protocol on stdin/stdout
and forwards every call to the gateway at --gateway with sdk/client. Logs go to
stderr only. The token comes from --token or TOOLFLEET_TOKEN. See docs/mcp.md.`,
		Example: `  toolfleet mcp --gateway 127.0.0.1:8080
  TOOLFLEET_TOKEN=... toolfleet mcp --gateway gateway.example.com:443`,
		Args:          cobra.NoArgs,
		SilenceErrors: true, // main prints the error, on stderr: stdout belongs to MCP
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return applyEnvAndDev(cmd.Flags())
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return errors.New("--log-level: want debug, info, warn or error")
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: lvl}))
			c, err := gf.client()
			if err != nil {
				return err
			}
			defer c.Close()
			return runMCP(cmd.Context(), mcp.ClientBackend(c), cmd.InOrStdin(), cmd.OutOrStdout(), log)
		},
	}
	f := cmd.Flags()
	gf.register(f)
	f.StringVar(&logLevel, "log-level", "warn", "least level of logs on stderr: debug, info, warn, error")
	config.BindEnv(f, "TOOLFLEET")
	return cmd
}

// runMCP serves one MCP session on in/out until the client closes in or ctx is done.
func runMCP(ctx context.Context, b mcp.Backend, in io.Reader, out io.Writer, log *slog.Logger) error {
	srv := mcp.New(b, mcp.Options{Name: "toolfleet-mcp", Logger: log})
	err := srv.Serve(ctx, &sdk.IOTransport{Reader: io.NopCloser(in), Writer: nopWriteCloser{out}})
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
		return nil // the client hung up, or Ctrl-C
	}
	return err
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/internal/config"
)

// newConnectionsCommand is `toolfleet connections list | connect PROVIDER |
// revoke PROVIDER`: the caller's own accounts at the providers the operator
// configured, which tools act with (docs/credentials.md).
func newConnectionsCommand() *cobra.Command {
	var gf gatewayFlags
	cmd := &cobra.Command{
		Use:   "connections",
		Short: "Your accounts at providers (GitHub, your company's login) that tools act with",
	}
	var out output
	pf := cmd.PersistentFlags()
	gf.register(pf)
	out.register(pf)
	config.BindEnv(pf, "TOOLFLEET")
	cmd.PersistentPreRunE = func(*cobra.Command, []string) error {
		if err := applyEnvAndDev(pf); err != nil {
			return err
		}
		return out.validate()
	}

	list := &cobra.Command{Use: "list", Short: "List your connections and the providers you may connect", Args: cobra.NoArgs}
	list.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := gf.connections()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), gf.Timeout)
		defer cancel()
		resp, err := c.ListConnections(ctx, connect.NewRequest(&toolfleetv1.ListConnectionsRequest{}))
		if err != nil {
			return connectionsError(err)
		}
		w := cmd.OutOrStdout()
		if out.structured(w) {
			return out.proto(w, resp.Msg)
		}
		if len(resp.Msg.GetConnections()) == 0 {
			fmt.Fprintln(w, "No connections.")
		} else {
			tw := newTable(w, "PROVIDER", "SCOPES", "CONNECTED", "TOKEN EXPIRES", "REFRESHABLE", "ID")
			for _, c := range resp.Msg.GetConnections() {
				id := c.GetId()
				if c.GetUnreadable() {
					id = "(unreadable: revoke and connect again)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%s\n", c.GetProvider(), strings.Join(c.GetScopes(), " "), when(c.GetCreated()),
					when(c.GetExpires()), c.GetRefreshable(), id)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		if p := resp.Msg.GetProviders(); len(p) > 0 {
			fmt.Fprintf(w, "Providers: %s (connect with: toolfleet connections connect PROVIDER)\n", strings.Join(p, ", "))
		}
		return nil
	}

	var scopes []string
	connectCmd := &cobra.Command{Use: "connect PROVIDER", Short: "Connect your account at PROVIDER: prints a link to open in your browser (valid once, for a few minutes)",
		Args: cobra.ExactArgs(1)}
	connectCmd.Flags().StringSliceVar(&scopes, "scope", nil, "scopes to ask for besides the provider's (repeat or comma-separate)")
	connectCmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := gf.connections()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), gf.Timeout)
		defer cancel()
		resp, err := c.StartConnection(ctx, connect.NewRequest(&toolfleetv1.StartConnectionRequest{Provider: args[0], Scopes: scopes}))
		if err != nil {
			return connectionsError(err)
		}
		w := cmd.OutOrStdout()
		if out.chosen() {
			return out.proto(w, resp.Msg)
		}
		fmt.Fprintf(w, "Open this link in your browser to connect your %s account (valid once, for a few minutes):\n%s\n", args[0], resp.Msg.GetAuthorizationUrl())
		return nil
	}

	revoke := &cobra.Command{Use: "revoke PROVIDER", Short: "Delete your connection to PROVIDER and revoke its tokens there", Args: cobra.ExactArgs(1)}
	revoke.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := gf.connections()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), gf.Timeout)
		defer cancel()
		resp, err := c.RevokeConnection(ctx, connect.NewRequest(&toolfleetv1.RevokeConnectionRequest{Provider: args[0]}))
		if err != nil {
			return connectionsError(err)
		}
		w := cmd.OutOrStdout()
		if out.chosen() {
			return out.proto(w, resp.Msg)
		}
		switch {
		case !resp.Msg.GetRevoked():
			fmt.Fprintf(w, "You had no %s connection.\n", args[0])
		case resp.Msg.GetProviderWarning() != "":
			fmt.Fprintf(w, "Deleted your %s connection; %s did not confirm revoking its tokens: %s\n", args[0], args[0], resp.Msg.GetProviderWarning())
		default:
			fmt.Fprintf(w, "Revoked your %s connection.\n", args[0])
		}
		return nil
	}
	cmd.AddCommand(list, connectCmd, revoke)
	explainErrors(cmd, &gf)
	return cmd
}

// connections speaks Connect (HTTP) to the gateway's ConnectionService.
func (g *gatewayFlags) connections() (toolfleetv1connect.ConnectionServiceClient, error) {
	base, opts, err := g.connectBase()
	if err != nil {
		return nil, err
	}
	return toolfleetv1connect.NewConnectionServiceClient(http.DefaultClient, base, opts...), nil
}

// connectionsError says what a ConnectionService failure means to the caller.
func connectionsError(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		switch ce.Code() {
		case connect.CodeUnimplemented, connect.CodeNotFound:
			if strings.Contains(ce.Message(), "unknown provider") {
				return fmt.Errorf("%s (toolfleet connections list shows the providers)", ce.Message())
			}
			return errors.New("this gateway has no connections configured (the operator sets --connections-file; docs/credentials.md)")
		case connect.CodeUnauthenticated:
			return fmt.Errorf("the gateway did not accept your token (--token or TOOLFLEET_TOKEN): %s", ce.Message())
		}
		return errors.New(ce.Message())
	}
	return err
}

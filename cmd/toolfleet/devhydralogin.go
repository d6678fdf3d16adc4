package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolfleet/toolfleet/internal/config"
	"github.com/toolfleet/toolfleet/internal/hydralogin"
	"github.com/toolfleet/toolfleet/internal/loopback"
)

// newDevHydraLoginCommand is `toolfleet dev hydra-login`: the login and
// consent app an Ory Hydra next to `toolfleet dev` sends people to
// (docs/credentials.md "Running Hydra next to toolfleet dev").
func newDevHydraLoginCommand() *cobra.Command {
	var listen, adminURL, clientsFile string
	cmd := &cobra.Command{
		Use:   "hydra-login",
		Short: "Serve a login and consent app for an Ory Hydra run next to toolfleet dev",
		Long: `hydra-login serves the pages Ory Hydra sends a person to when they sign in
(the console's OpenID Connect sign-in, connecting an account for a tool): a
page that asks for a name — any name, no password: development only — and one
that lists the scopes the client asks for. It tells Hydra's admin API what the
person decided. It listens only on loopback.

  hydra serve all --dev   # with URLS_LOGIN=http://127.0.0.1:3000/login,
                          # URLS_CONSENT=…/consent, URLS_LOGOUT=…/logout
  toolfleet dev hydra-login --hydra-admin http://127.0.0.1:4445

With --clients FILE (a JSON array of OAuth clients as Hydra's admin API takes
them, each with its client_id) it first registers those clients under their
fixed ids: created, or replaced when they exist (k8s/components/hydra/clients.json
is the kind overlay's).`,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return config.ApplyEnv(cmd.Flags(), "TOOLFLEET_HYDRA_LOGIN")
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !loopback.Listen(listen) {
				return fmt.Errorf("--listen %s: the development login app checks no password, so it listens only on loopback (e.g. 127.0.0.1:3000)", listen)
			}
			admin, err := hydralogin.NewAdmin(adminURL, nil)
			if err != nil {
				return fmt.Errorf("--hydra-admin: %w", err)
			}
			if clientsFile != "" {
				if err := registerClients(cmd.Context(), admin, clientsFile); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Registered the OAuth clients of %s\n", clientsFile)
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("listen on %s (--listen): %w", listen, err)
			}
			srv := &http.Server{Handler: hydralogin.New(admin, nil).Handler(), ReadHeaderTimeout: 10 * time.Second,
				ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
			base := "http://" + ln.Addr().String()
			fmt.Fprintf(cmd.OutOrStdout(), "Hydra login and consent app on %s (Hydra admin API %s)\n", base, adminURL)
			fmt.Fprintf(cmd.OutOrStdout(), "Start Hydra with URLS_LOGIN=%s/login URLS_CONSENT=%s/consent URLS_LOGOUT=%s/logout\n", base, base, base)
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ln) }()
			select {
			case err := <-served:
				return fmt.Errorf("serve %s: %w", base, err)
			case <-cmd.Context().Done():
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("stop %s: %w", base, err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:3000", "loopback address to serve the pages on")
	f.StringVar(&adminURL, "hydra-admin", "http://127.0.0.1:4445", "Hydra's admin API")
	f.StringVar(&clientsFile, "clients", "", "JSON file of OAuth clients to register (create or replace) at Hydra before serving")
	config.BindEnv(f, "TOOLFLEET_HYDRA_LOGIN")
	return cmd
}

// clientsWait bounds how long hydra-login waits for Hydra's admin API to
// answer (a port-forward that is still starting) before registering clients.
const clientsWait = time.Minute

// registerClients creates or replaces every client of path at Hydra,
// retrying while the admin API does not answer at all.
func registerClients(ctx context.Context, admin *hydralogin.Admin, path string) error {
	clients, err := hydralogin.ReadClients(path)
	if err != nil {
		return fmt.Errorf("--clients: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, clientsWait)
	defer cancel()
	for _, c := range clients {
		for {
			err := admin.EnsureClient(ctx, c)
			if err == nil {
				break
			}
			if ae := (*hydralogin.AdminError)(nil); errors.As(err, &ae) || ctx.Err() != nil {
				return fmt.Errorf("register the OAuth client %s at Hydra (--clients %s): %w", c.ID, path, err)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("register the OAuth client %s at Hydra (--clients %s): %w", c.ID, path, err)
			case <-time.After(time.Second):
			}
		}
	}
	return nil
}

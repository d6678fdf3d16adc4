package hydralogin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// maxClientsFile bounds a clients file.
const maxClientsFile = 1 << 20

// ClientSpec is one OAuth 2.0 client as Hydra's admin API takes it (the
// body of POST /admin/clients: client_id, client_secret, grant_types,
// redirect_uris, scope, …), kept as given so that every field Hydra knows
// passes through.
type ClientSpec struct {
	// ID is its client_id, which must be set: the client is registered
	// under that fixed id.
	ID   string
	body json.RawMessage
}

// ReadClients reads a JSON array of clients (see [ClientSpec]).
func ReadClients(path string) ([]ClientSpec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("clients file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxClientsFile+1))
	if err != nil {
		return nil, fmt.Errorf("clients file %s: %w", path, err)
	}
	if len(b) > maxClientsFile {
		return nil, fmt.Errorf("clients file %s is over %d bytes", path, maxClientsFile)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("clients file %s: want a JSON array of clients: %w", path, err)
	}
	out := make([]ClientSpec, 0, len(raw))
	for i, r := range raw {
		var c struct {
			ID string `json:"client_id"`
		}
		if err := json.Unmarshal(r, &c); err != nil {
			return nil, fmt.Errorf("clients file %s: client %d: %w", path, i, err)
		}
		if c.ID == "" {
			return nil, fmt.Errorf("clients file %s: client %d has no client_id", path, i)
		}
		out = append(out, ClientSpec{ID: c.ID, body: r})
	}
	return out, nil
}

// EnsureClient registers c under its fixed id: it replaces the client when
// it exists (PUT /admin/clients/{id}: a changed secret, scope or redirect
// URI takes effect) and creates it otherwise. Running it again changes
// nothing, and the client's consents and tokens are kept.
func (a *Admin) EnsureClient(ctx context.Context, c ClientSpec) error {
	path := "/admin/clients/" + url.PathEscape(c.ID)
	err := a.do(ctx, http.MethodPut, path, "", c.body, nil)
	if ae := (*AdminError)(nil); !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
		return err
	}
	err = a.do(ctx, http.MethodPost, "/admin/clients", "", c.body, nil)
	if ae := (*AdminError)(nil); errors.As(err, &ae) && ae.Status == http.StatusConflict {
		// Created by someone else since the PUT: replace it with c.
		return a.do(ctx, http.MethodPut, path, "", c.body, nil)
	}
	return err
}

// clip cuts an admin API answer to what an error shows.
func clip(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 512 {
		s = s[:512]
	}
	return s
}

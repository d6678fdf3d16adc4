package check

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// hydraClients is k8s/components/hydra/clients.json: the OAuth clients
// `toolfleet dev hydra-login --clients` registers at Hydra.
var hydraClients = filepath.Join(repo, "k8s", "components", "hydra", "clients.json")

// checkHydra: with k8s/components/hydra, Hydra runs the image as published
// (args only), its admin API stays on the pod's loopback, and the gateway's
// connections file, its Secret and the registered client agree (a client id,
// secret or redirect URI that differs would fail only when someone signs in).
func checkHydra(t *testing.T, objs []Object) {
	t.Helper()
	var hydra, gw *appsv1.Deployment
	configMaps, secrets := map[string]*corev1.ConfigMap{}, map[string]*corev1.Secret{}
	for _, o := range objs {
		switch obj := o.Obj.(type) {
		case *appsv1.Deployment:
			switch obj.Name {
			case "hydra":
				hydra = obj
			case "gateway":
				gw = obj
			}
		case *corev1.ConfigMap:
			configMaps[obj.Name] = obj
		case *corev1.Secret:
			secrets[obj.Name] = obj
		case *corev1.Service:
			for _, p := range obj.Spec.Ports {
				if p.Port == 4445 || p.TargetPort.IntValue() == 4445 {
					t.Errorf("%s exposes Hydra's admin API (port 4445): it is reached only through a port-forward", o)
				}
			}
		}
	}
	if hydra == nil || gw == nil {
		t.Fatal("no hydra or gateway Deployment")
	}
	spec := hydra.Spec.Template.Spec
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		if len(c.Command) > 0 || !strings.HasPrefix(c.Image, "oryd/hydra:v2.3.0") {
			t.Errorf("hydra container %s runs %s %v: want oryd/hydra:v2.3.0 with args only", c.Name, c.Image, c.Command)
		}
	}
	env := EffectiveEnv(spec.Containers[0], configMaps)
	if env["SERVE_ADMIN_HOST"] != "127.0.0.1" {
		t.Errorf("Hydra's admin API listens on %q, want the pod's loopback (127.0.0.1)", env["SERVE_ADMIN_HOST"])
	}

	// The gateway reads the connections file from the ConfigMap and its
	// secrets from the Secret, both mounted read-only.
	path := EffectiveEnv(gw.Spec.Template.Spec.Containers[0], configMaps)["TOOLFLEET_CONNECTIONS_FILE"]
	file := mountedFile(t, gw, path, configMaps, secrets)
	var conns struct {
		PublicURL   string `json:"public_url"`
		KeyRingFile string `json:"key_ring_file"`
		Providers   []struct {
			Name             string `json:"name"`
			ClientID         string `json:"client_id"`
			ClientSecretFile string `json:"client_secret_file"`
		} `json:"providers"`
	}
	if err := json.Unmarshal([]byte(file), &conns); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if mountedFile(t, gw, conns.KeyRingFile, configMaps, secrets) == "" {
		t.Errorf("the key ring %s is empty", conns.KeyRingFile)
	}
	b, err := os.ReadFile(hydraClients)
	if err != nil {
		t.Fatal(err)
	}
	var clients []struct {
		ID           string   `json:"client_id"`
		Secret       string   `json:"client_secret"`
		RedirectURIs []string `json:"redirect_uris"`
	}
	if err := json.Unmarshal(b, &clients); err != nil {
		t.Fatalf("%s: %v", hydraClients, err)
	}
	if len(conns.Providers) == 0 {
		t.Fatalf("%s names no provider", path)
	}
	for _, p := range conns.Providers {
		i := slices.IndexFunc(clients, func(c struct {
			ID           string   `json:"client_id"`
			Secret       string   `json:"client_secret"`
			RedirectURIs []string `json:"redirect_uris"`
		}) bool {
			return c.ID == p.ClientID
		})
		if i < 0 {
			t.Errorf("provider %s's client %s is not in %s", p.Name, p.ClientID, hydraClients)
			continue
		}
		if got := mountedFile(t, gw, p.ClientSecretFile, configMaps, secrets); got != clients[i].Secret {
			t.Errorf("provider %s's client secret (%s) differs from the one %s registers", p.Name, p.ClientSecretFile, hydraClients)
		}
		if cb := strings.TrimSuffix(conns.PublicURL, "/") + "/connections/callback"; !slices.Contains(clients[i].RedirectURIs, cb) {
			t.Errorf("client %s does not allow the gateway's callback %s (redirect_uris %v)", p.ClientID, cb, clients[i].RedirectURIs)
		}
	}
}

// mountedFile is the content of the file at path in the gateway's container:
// a key of a ConfigMap or Secret volume mounted read-only at its folder.
func mountedFile(t *testing.T, d *appsv1.Deployment, path string, configMaps map[string]*corev1.ConfigMap, secrets map[string]*corev1.Secret) string {
	t.Helper()
	c := d.Spec.Template.Spec.Containers[0]
	dir, key := filepath.Dir(path), filepath.Base(path)
	for _, m := range c.VolumeMounts {
		if m.MountPath != dir {
			continue
		}
		if !m.ReadOnly {
			t.Errorf("%s is mounted writable", dir)
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			switch {
			case v.Name != m.Name:
			case v.ConfigMap != nil && configMaps[v.ConfigMap.Name] != nil:
				if s, ok := configMaps[v.ConfigMap.Name].Data[key]; ok {
					return s
				}
			case v.Secret != nil && secrets[v.Secret.SecretName] != nil:
				s := secrets[v.Secret.SecretName]
				if b, ok := s.Data[key]; ok {
					return string(b)
				}
				if v, ok := s.StringData[key]; ok {
					return v
				}
			}
		}
	}
	t.Errorf("%s is in no ConfigMap or Secret mounted into the gateway", path)
	return ""
}

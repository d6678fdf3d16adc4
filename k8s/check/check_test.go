package check

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// repo is the repository root, seen from this module's folder.
const repo = "../.."

// repoRules reads the Tiltfile's images and the external Secrets documented in
// docs/operations.md.
func repoRules(t *testing.T) Rules {
	t.Helper()
	images, err := TiltfileImages(filepath.Join(repo, "Tiltfile"))
	if err != nil {
		t.Fatal(err)
	}
	external, err := ExternalRefs(filepath.Join(repo, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	return Rules{
		TiltImages:      images,
		ThirdPartyRepos: map[string]bool{"nats": true, "temporalio/temporal": true, "temporalio/server": true, "temporalio/admin-tools": true, "postgres": true, "oryd/hydra": true},
		External:        external,
	}
}

// workerList is the one list of workers (k8s/base/workers/kustomization.yaml).
var workerList = filepath.Join(repo, "k8s", "base", "workers", "kustomization.yaml")

// fleetServices are the toolfleet workloads every build must hold: the gateway,
// the orchestrator and worker-NAME for every worker on the list.
func fleetServices(t *testing.T) (services, workers []string) {
	t.Helper()
	names, err := WorkerList(workerList)
	if err != nil {
		t.Fatal(err)
	}
	services = []string{"gateway", "orchestrator"}
	for _, n := range names {
		services = append(services, "worker-"+n)
		workers = append(workers, "worker-"+n)
	}
	return services, workers
}

// TestWorkerList: every worker on the list is a Go package the Tiltfile can
// compile (./workers/NAME) and its manifest names everything worker-NAME, as the
// Tiltfile's k8s_resource objects expect, with the image toolfleet-worker-NAME.
func TestWorkerList(t *testing.T) {
	t.Parallel()
	_, workers := fleetServices(t)
	objs, err := Build(filesys.MakeFsOnDisk(), filepath.Join(repo, "k8s", "base", "workers"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range workers {
		name := strings.TrimPrefix(w, "worker-")
		if _, err := os.Stat(filepath.Join(repo, "workers", name, "main.go")); err != nil {
			t.Errorf("%s is on the worker list, but the Tiltfile cannot compile it: %v", w, err)
		}
		for _, kind := range []string{"ServiceAccount", "Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler"} {
			if !has(objs, kind, w) {
				t.Errorf("the manifest of %s has no %s named %s", w, kind, w)
			}
		}
		for _, o := range objs {
			if d, ok := o.Obj.(*appsv1.Deployment); ok && d.Name == w {
				if d.Labels["app.kubernetes.io/component"] != "worker" {
					t.Errorf("%s is not labelled app.kubernetes.io/component=worker (the overlays and the NetworkPolicy select workers by it)", o)
				}
				if c := d.Spec.Template.Spec.Containers; len(c) == 0 || c[0].Image != "toolfleet-"+w {
					t.Errorf("%s does not run the image toolfleet-%s that the Tiltfile builds for it", o, w)
				}
			}
		}
	}
}

func TestManifests(t *testing.T) {
	t.Parallel()
	rules := repoRules(t)
	services, _ := fleetServices(t)
	for _, s := range services {
		if !rules.TiltImages["toolfleet-"+s] {
			t.Errorf("the Tiltfile does not build toolfleet-%s (it builds %v)", s, rules.TiltImages)
		}
	}
	tests := []struct {
		dir   string
		check func(t *testing.T, objs []Object)
	}{
		{dir: "k8s/base"},
		{dir: "k8s/overlays/kind", check: func(t *testing.T, objs []Object) {
			for _, infra := range []string{"nats", "temporal"} {
				if !has(objs, "StatefulSet", infra) {
					t.Errorf("the kind overlay has no %s StatefulSet", infra)
				}
			}
			checkKind(t, objs, rules, 1)
		}},
		{dir: "k8s/overlays/kind-hydra", check: func(t *testing.T, objs []Object) {
			checkKind(t, objs, rules, 1)
			checkHydra(t, objs)
		}},
		{dir: "k8s/overlays/kind-ha", check: func(t *testing.T, objs []Object) {
			// Temporal as production runs it: the server on PostgreSQL, its schema
			// and namespace set up by a Job; no dev server.
			if !has(objs, "StatefulSet", "postgres") || !has(objs, "Deployment", "temporal") || !has(objs, "Job", "temporal-setup") {
				t.Error("kind-ha lacks the postgres StatefulSet, the temporal Deployment or the temporal-setup Job")
			}
			for _, w := range podTemplates(objs) {
				for _, c := range w.template.Spec.Containers {
					if repo, _ := splitImage(c.Image); repo == "temporalio/temporal" {
						t.Errorf("kind-ha %s runs the Temporal dev server (%s)", w.Object, c.Image)
					}
				}
			}
			checkKind(t, objs, rules, 2)
		}},
		{dir: "k8s/overlays/prod", check: func(t *testing.T, objs []Object) {
			for _, infra := range []string{"nats", "temporal"} {
				if has(objs, "StatefulSet", infra) {
					t.Errorf("the prod overlay runs an in-cluster %s; it must point at the external one", infra)
				}
			}
			for _, o := range objs {
				if d, ok := o.Obj.(*appsv1.Deployment); ok && (d.Spec.Replicas == nil || *d.Spec.Replicas < 3) {
					t.Errorf("prod %s runs fewer than 3 replicas", o)
				}
			}
			// Every image is a release (an images: entry of the overlay), never the
			// bare name Tilt builds: a worker added to the list needs its entry.
			for _, w := range podTemplates(objs) {
				for _, c := range w.template.Spec.Containers {
					if repo, _ := splitImage(c.Image); rules.TiltImages[repo] {
						t.Errorf("prod %s runs %s, the name Tilt builds: add it to k8s/overlays/prod's images: with its registry and tag", w.Object, c.Image)
					}
				}
			}
			for _, p := range CheckFleet(objs, FleetRules{JetStreamReplicas: 3, MinReplicas: 3}) {
				t.Error(p)
			}
			var np *networkingv1.NetworkPolicy
			for _, o := range objs {
				if p, ok := o.Obj.(*networkingv1.NetworkPolicy); ok {
					np = p
				}
			}
			if np == nil || np.Spec.PodSelector.MatchLabels["app.kubernetes.io/component"] != "worker" || len(np.Spec.Ingress) != 1 {
				t.Fatalf("prod has no NetworkPolicy guarding the workers: %v", np)
			}
			var from []string
			for _, peer := range np.Spec.Ingress[0].From {
				from = append(from, peer.PodSelector.MatchLabels["app.kubernetes.io/name"])
			}
			if slices.Sort(from); !slices.Equal(from, []string{"gateway", "orchestrator"}) {
				t.Errorf("workers accept traffic from %v, want only gateway and orchestrator", from)
			}
		}},
		{dir: "k8s/check/testdata/prod-with-limits", check: checkLimitsMounted},
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			t.Parallel()
			objs, err := Build(filesys.MakeFsOnDisk(), filepath.Join(repo, tt.dir))
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range services {
				if !has(objs, "Deployment", s) || !has(objs, "Service", s) || !has(objs, "ServiceAccount", s) {
					t.Errorf("%s lacks the Deployment, Service or ServiceAccount of %s", tt.dir, s)
				}
			}
			for _, p := range Check(objs, rules) {
				t.Error(p)
			}
			if tt.check != nil {
				tt.check(t, objs)
			}
		})
	}
}

// kindCPUBudgetMilli is what one kind node of a 2-core machine has left for
// the fleet: 2000m allocatable, 850m requested by the control plane and
// CoreDNS, 150m of slack.
const kindCPUBudgetMilli = 1000

// checkKind holds for both kind overlays: a 3-node JetStream cluster, every
// asset R3, two gateways and orchestrators, workers at minWorkers or more, the
// CPU budget, and every image the Tiltfile builds in use.
func checkKind(t *testing.T, objs []Object, rules Rules, minWorkers int32) {
	t.Helper()
	for _, p := range CheckNATSCluster(objs, 3) {
		t.Error(p)
	}
	for _, p := range CheckFleet(objs, FleetRules{JetStreamReplicas: 3, MinReplicas: 2, CPUBudgetMilli: kindCPUBudgetMilli}) {
		t.Error(p)
	}
	for _, o := range objs {
		if d, ok := o.Obj.(*appsv1.Deployment); ok && d.Labels["app.kubernetes.io/component"] == "worker" &&
			(d.Spec.Replicas == nil || *d.Spec.Replicas < minWorkers) {
			t.Errorf("%s runs fewer than %d replicas", o, minWorkers)
		}
	}
	// The console is served (docs/console.md).
	configMaps := map[string]*corev1.ConfigMap{}
	for _, o := range objs {
		if cm, ok := o.Obj.(*corev1.ConfigMap); ok {
			configMaps[cm.Name] = cm
		}
	}
	for _, o := range objs {
		if d, ok := o.Obj.(*appsv1.Deployment); ok && d.Name == "gateway" {
			env := EffectiveEnv(d.Spec.Template.Spec.Containers[0], configMaps)
			if v := env["TOOLFLEET_CONSOLE"]; v != "true" {
				t.Errorf("the gateway does not serve the console (TOOLFLEET_CONSOLE=%q)", v)
			}
			// Two replicas behind one Service: a browser's session must open on both.
			if d.Spec.Replicas != nil && *d.Spec.Replicas > 1 && env["TOOLFLEET_CONSOLE_SESSION_KEY_FILE"] == "" {
				t.Errorf("%d gateway replicas seal console sessions with keys of their own (no TOOLFLEET_CONSOLE_SESSION_KEY_FILE)", *d.Spec.Replicas)
			}
		}
	}
	steady, surge := CPURequests(objs)
	t.Logf("CPU requested: %dm, %dm more during a rolling update of everything (budget %dm)", steady, surge, kindCPUBudgetMilli)
	// Every image Tilt builds is used, or Tilt would build it for nothing.
	used := map[string]bool{}
	for _, w := range podTemplates(objs) {
		for _, c := range w.template.Spec.Containers {
			used[c.Image] = true
		}
	}
	for img := range rules.TiltImages {
		if !used[img] {
			t.Errorf("the Tiltfile builds %s, which no workload uses", img)
		}
	}
}

// checkLimitsMounted: with k8s/components/limits the gateway's
// TOOLFLEET_LIMITS_FILE names a file of a ConfigMap mounted read-only.
func checkLimitsMounted(t *testing.T, objs []Object) {
	t.Helper()
	configMaps := map[string]*corev1.ConfigMap{}
	var gw *appsv1.Deployment
	for _, o := range objs {
		switch obj := o.Obj.(type) {
		case *corev1.ConfigMap:
			configMaps[obj.Name] = obj
		case *appsv1.Deployment:
			if obj.Name == "gateway" {
				gw = obj
			}
		}
	}
	if gw == nil {
		t.Fatal("no gateway Deployment")
	}
	c := gw.Spec.Template.Spec.Containers[0]
	file := EffectiveEnv(c, configMaps)["TOOLFLEET_LIMITS_FILE"]
	if file == "" {
		t.Fatal("the gateway has no TOOLFLEET_LIMITS_FILE")
	}
	for _, m := range c.VolumeMounts {
		if filepath.Dir(file) != filepath.Clean(m.MountPath) {
			continue
		}
		for _, v := range gw.Spec.Template.Spec.Volumes {
			if v.Name != m.Name || v.ConfigMap == nil {
				continue
			}
			cm := configMaps[v.ConfigMap.Name]
			if cm == nil || cm.Data[filepath.Base(file)] == "" || !m.ReadOnly {
				t.Errorf("TOOLFLEET_LIMITS_FILE %s: ConfigMap %s lacks the key, or the mount is writable", file, v.ConfigMap.Name)
			}
			return
		}
	}
	t.Errorf("TOOLFLEET_LIMITS_FILE %s is on no mounted ConfigMap", file)
}

func has(objs []Object, kind, name string) bool {
	return slices.ContainsFunc(objs, func(o Object) bool { return o.Kind == kind && o.Name == name })
}

func TestExternalRefsReadsOnlyItsSection(t *testing.T) {
	t.Parallel()
	doc := "# Ops\n\nSee `not-this`.\n\n## External Secrets\n\n| Secret | keys |\n|---|---|\n| `toolfleet-nats` | `nats.creds` |\n\n### Details\n\n`also-this`\n\n## Next\n\n`not-that`\n"
	dir := t.TempDir()
	path := filepath.Join(dir, "ops.md")
	if err := filesys.MakeFsOnDisk().WriteFile(path, []byte(doc)); err != nil {
		t.Fatal(err)
	}
	got, err := ExternalRefs(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Secret/toolfleet-nats", "Secret/also-this"} {
		if !got[want] {
			t.Errorf("%s missing from %v", want, got)
		}
	}
	for _, not := range []string{"Secret/not-this", "Secret/not-that"} {
		if got[not] {
			t.Errorf("%s read from outside the section: %v", not, got)
		}
	}
}

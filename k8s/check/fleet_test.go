package check

import (
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// TestFleetChecksCatch breaks the real kind overlay one way at a time: the
// fleet and NATS cluster checks must each notice.
func TestFleetChecksCatch(t *testing.T) {
	t.Parallel()
	find := func(objs []Object, kind, name string) Object {
		for _, o := range objs {
			if o.Kind == kind && o.Name == name {
				return o
			}
		}
		t.Fatalf("no %s/%s", kind, name)
		return Object{}
	}
	tests := []struct {
		name    string
		breakIt func(objs []Object)
		want    string
	}{
		{"one NATS node", func(objs []Object) {
			*find(objs, "StatefulSet", "nats").Obj.(*appsv1.StatefulSet).Spec.Replicas = 1
		}, "does not run 3 replicas"},
		{"nodes started one by one", func(objs []Object) {
			find(objs, "StatefulSet", "nats").Obj.(*appsv1.StatefulSet).Spec.PodManagementPolicy = appsv1.OrderedReadyPodManagement
		}, "podManagementPolicy: Parallel"},
		{"routes only to ready pods", func(objs []Object) {
			find(objs, "Service", "nats-headless").Obj.(*corev1.Service).Spec.PublishNotReadyAddresses = false
		}, "publish not-ready addresses"},
		{"no max_file_store", func(objs []Object) {
			cm := find(objs, "ConfigMap", "nats-config").Obj.(*corev1.ConfigMap)
			cm.Data["nats.conf"] = strings.Replace(cm.Data["nats.conf"], "max_file_store", "# max_file_store", 1)
		}, "max_file_store"},
		{"a route missing", func(objs []Object) {
			cm := find(objs, "ConfigMap", "nats-config").Obj.(*corev1.ConfigMap)
			cm.Data["nats.conf"] = strings.Replace(cm.Data["nats.conf"], "nats://nats-2.nats-headless:6222", "", 1)
		}, "no cluster route to nats-2.nats-headless"},
		{"assets R1", func(objs []Object) {
			delete(find(objs, "ConfigMap", "toolfleet-config").Obj.(*corev1.ConfigMap).Data, EnvJetStreamReplicas)
		}, "Deployment/worker-kv container kv uses NATS with TOOLFLEET_JS_REPLICAS=\"\""},
		{"a Deployment overriding the replicas", func(objs []Object) {
			d := find(objs, "Deployment", "orchestrator").Obj.(*appsv1.Deployment)
			c := &d.Spec.Template.Spec.Containers[0]
			c.Env = append(c.Env, corev1.EnvVar{Name: EnvJetStreamReplicas, Value: "1"})
		}, "Deployment/orchestrator container orchestrator uses NATS with TOOLFLEET_JS_REPLICAS=\"1\""},
		{"idempotency in memory", func(objs []Object) {
			find(objs, "ConfigMap", "toolfleet-config").Obj.(*corev1.ConfigMap).Data[EnvIdempotencyFile] = "false"
		}, "idempotency store in memory"},
		{"one orchestrator", func(objs []Object) {
			*find(objs, "Deployment", "orchestrator").Obj.(*appsv1.Deployment).Spec.Replicas = 1
		}, "Deployment/orchestrator runs fewer than 2 replicas"},
		{"CPU over the node", func(objs []Object) {
			d := find(objs, "Deployment", "orchestrator").Obj.(*appsv1.Deployment)
			d.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("250m")
		}, "over the 1000m budget"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			objs, err := Build(filesys.MakeFsOnDisk(), filepath.Join(repo, "k8s/overlays/kind"))
			if err != nil {
				t.Fatal(err)
			}
			rules := FleetRules{JetStreamReplicas: 3, MinReplicas: 2, CPUBudgetMilli: kindCPUBudgetMilli}
			if p := append(CheckNATSCluster(objs, 3), CheckFleet(objs, rules)...); len(p) > 0 {
				t.Fatalf("the kind overlay has problems before breaking it: %v", p)
			}
			tt.breakIt(objs)
			p := strings.Join(append(CheckNATSCluster(objs, 3), CheckFleet(objs, rules)...), "\n")
			if !strings.Contains(p, tt.want) {
				t.Fatalf("problems %q, want one mentioning %q", p, tt.want)
			}
		})
	}
}

// TestCPURequests counts replicas, surge pods and Jobs as Kubernetes schedules them.
func TestCPURequests(t *testing.T) {
	t.Parallel()
	// good: a Deployment of 2 pods requesting 10m, default surge 25% of 2 → 1 pod.
	objs, err := buildString(t, good)
	if err != nil {
		t.Fatal(err)
	}
	if steady, surge := CPURequests(objs); steady != 20 || surge != 10 {
		t.Fatalf("CPURequests = %dm + %dm, want 20m + 10m", steady, surge)
	}
	job := `
---
apiVersion: batch/v1
kind: Job
metadata:
  name: setup
spec:
  template:
    spec:
      restartPolicy: OnFailure
      serviceAccountName: svc
      automountServiceAccountToken: false
      securityContext:
        runAsNonRoot: true
      containers:
        - name: setup
          image: toolfleet-svc
          resources:
            requests:
              cpu: 5m
              memory: 16Mi
            limits:
              memory: 64Mi
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: ["ALL"]
`
	manifest := strings.Replace(good, "replicas: 2", "replicas: 4\n  strategy:\n    type: RollingUpdate\n    rollingUpdate:\n      maxSurge: 2", 1) + job
	if objs, err = buildString(t, manifest); err != nil {
		t.Fatal(err)
	}
	if steady, surge := CPURequests(objs); steady != 45 || surge != 20 {
		t.Fatalf("CPURequests = %dm + %dm, want 45m (4x10 + a 5m Job) + 20m (2 surge pods)", steady, surge)
	}
	// A Job needs no probes; it is checked like any pod otherwise.
	if p := Check(objs, testRules); len(p) > 0 {
		t.Fatalf("a Job without probes: %v", p)
	}
}

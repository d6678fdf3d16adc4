package check

import (
	"fmt"
	"regexp"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// FleetRules are what an overlay that runs the fleet on replicated JetStream
// must hold (the kind, kind-ha and prod overlays).
type FleetRules struct {
	// JetStreamReplicas is the replica count every NATS-using container must be
	// given (env EnvJetStreamReplicas); 0 skips the rule.
	JetStreamReplicas int
	// MinReplicas of the gateway and the orchestrator Deployments.
	MinReplicas int32
	// CPUBudgetMilli bounds the CPU the overlay requests (see CPURequests),
	// a rolling update's surge pods included; 0 skips the rule.
	CPUBudgetMilli int64
}

// Environment variables the fleet rules read.
const (
	// EnvJetStreamReplicas is the fleet-wide replica count of JetStream assets.
	EnvJetStreamReplicas = "TOOLFLEET_JS_REPLICAS"
	// EnvNATSURL marks a container that uses NATS.
	EnvNATSURL = "TOOLFLEET_NATS_URL"
	// EnvIdempotencyFile keeps the gateway's idempotency store on disk.
	EnvIdempotencyFile = "TOOLFLEET_IDEMPOTENCY_FILE_STORAGE"
)

// CheckFleet reports what breaks r in a built overlay, one sentence each.
func CheckFleet(objs []Object, r FleetRules) []string {
	var p problems
	configMaps := map[string]*corev1.ConfigMap{}
	for _, o := range objs {
		if cm, ok := o.Obj.(*corev1.ConfigMap); ok {
			configMaps[o.Name] = cm
		}
	}
	for _, w := range podTemplates(objs) {
		for _, c := range w.template.Spec.Containers {
			env := EffectiveEnv(c, configMaps)
			if _, nats := env[EnvNATSURL]; !nats || r.JetStreamReplicas == 0 {
				continue
			}
			if got := env[EnvJetStreamReplicas]; got != strconv.Itoa(r.JetStreamReplicas) {
				p.add("%s container %s uses NATS with %s=%q, want %d", w.Object, c.Name, EnvJetStreamReplicas, got, r.JetStreamReplicas)
			}
			if w.Name == "gateway" && env[EnvIdempotencyFile] != "true" {
				p.add("%s keeps its idempotency store in memory: set %s=true", w.Object, EnvIdempotencyFile)
			}
		}
	}
	for _, name := range []string{"gateway", "orchestrator"} {
		found := false
		for _, o := range objs {
			if d, ok := o.Obj.(*appsv1.Deployment); ok && o.Name == name {
				found = true
				if d.Spec.Replicas == nil || *d.Spec.Replicas < r.MinReplicas {
					p.add("%s runs fewer than %d replicas", o, r.MinReplicas)
				}
			}
		}
		if !found {
			p.add("no Deployment %s", name)
		}
	}
	if r.CPUBudgetMilli > 0 {
		steady, surge := CPURequests(objs)
		if steady+surge > r.CPUBudgetMilli {
			p.add("the overlay requests %dm of CPU (%dm running, %dm more during a rolling update), over the %dm budget of one kind node on a 2-core machine",
				steady+surge, steady, surge, r.CPUBudgetMilli)
		}
	}
	return p
}

// EffectiveEnv is what a container's environment holds from its envFrom
// ConfigMaps (in order) and its literal env entries; values taken from
// Secrets or fields are present with an empty value.
func EffectiveEnv(c corev1.Container, configMaps map[string]*corev1.ConfigMap) map[string]string {
	env := map[string]string{}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef == nil {
			continue
		}
		if cm := configMaps[ef.ConfigMapRef.Name]; cm != nil {
			for k, v := range cm.Data {
				env[ef.Prefix+k] = v
			}
		}
	}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return env
}

// CPURequests returns the CPU (millicores) an overlay's pods request when
// every workload runs its replicas (a Job one pod), and what the surge pods
// of a rolling update of every Deployment at once add to that.
func CPURequests(objs []Object) (steady, surge int64) {
	for _, w := range podTemplates(objs) {
		var pod int64
		for _, c := range w.template.Spec.Containers {
			pod += c.Resources.Requests.Cpu().MilliValue()
		}
		replicas := int64(1)
		switch obj := w.Obj.(type) {
		case *appsv1.Deployment:
			if obj.Spec.Replicas != nil {
				replicas = int64(*obj.Spec.Replicas)
			}
			surge += pod * surgePods(obj, replicas)
		case *appsv1.StatefulSet:
			if obj.Spec.Replicas != nil {
				replicas = int64(*obj.Spec.Replicas)
			}
		}
		steady += pod * replicas
	}
	return steady, surge
}

// surgePods is how many pods over replicas a rolling update of d starts.
func surgePods(d *appsv1.Deployment, replicas int64) int64 {
	if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		return 0
	}
	s := intstr.FromString("25%") // Kubernetes' default
	if ru := d.Spec.Strategy.RollingUpdate; ru != nil && ru.MaxSurge != nil {
		s = *ru.MaxSurge
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&s, int(replicas), true)
	if err != nil {
		return 1
	}
	return int64(n)
}

// natsRoute is one route of a NATS cluster block: nats://HOST:PORT.
var natsRoute = regexp.MustCompile(`nats://([a-z0-9.-]+):(\d+)`)

// CheckNATSCluster reports what keeps the overlay's NATS from being a working
// JetStream cluster of `nodes` nodes: the StatefulSet's size and start
// policy, a headless Service that publishes not-ready pods (routes must
// resolve before the cluster is ready), routes naming every pod through it,
// and an explicit max_file_store (else each node reserves 75% of the free
// disk it sees, and on one machine they all see the same disk).
func CheckNATSCluster(objs []Object, nodes int) []string {
	var p problems
	var ss *appsv1.StatefulSet
	for _, o := range objs {
		if s, ok := o.Obj.(*appsv1.StatefulSet); ok && o.Name == "nats" {
			ss = s
		}
	}
	if ss == nil {
		return []string{"no StatefulSet nats"}
	}
	if ss.Spec.Replicas == nil || int(*ss.Spec.Replicas) != nodes {
		p.add("StatefulSet/nats does not run %d replicas", nodes)
	}
	if ss.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		p.add("StatefulSet/nats starts its pods one by one: a JetStream cluster needs a quorum before any node is ready (podManagementPolicy: Parallel)")
	}
	var headless *corev1.Service
	for _, o := range objs {
		if s, ok := o.Obj.(*corev1.Service); ok && o.Name == ss.Spec.ServiceName {
			headless = s
		}
	}
	switch {
	case headless == nil:
		p.add("StatefulSet/nats names Service %q, which is not in the manifests", ss.Spec.ServiceName)
	case headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses:
		p.add("Service/%s must be headless and publish not-ready addresses, so that cluster routes resolve while the cluster forms", headless.Name)
	}
	conf := natsConfig(objs, ss)
	if conf == "" {
		p.add("StatefulSet/nats mounts no ConfigMap with a nats.conf")
		return p
	}
	if !regexp.MustCompile(`(?m)^\s*max_file_store:\s*\S+`).MatchString(conf) {
		p.add("nats.conf sets no jetstream max_file_store")
	}
	routes := map[string]bool{}
	for _, m := range natsRoute.FindAllStringSubmatch(conf, -1) {
		routes[m[1]] = true
	}
	for i := range nodes {
		host := fmt.Sprintf("nats-%d.%s", i, ss.Spec.ServiceName)
		if !routes[host] && !routes[host+"."+ssNamespace(objs)+".svc.cluster.local"] {
			p.add("nats.conf has no cluster route to %s", host)
		}
	}
	return p
}

func ssNamespace(objs []Object) string {
	for _, o := range objs {
		if o.Kind == "StatefulSet" && o.Name == "nats" {
			return o.Namespace
		}
	}
	return ""
}

// natsConfig returns the nats.conf of the ConfigMap the StatefulSet mounts.
func natsConfig(objs []Object, ss *appsv1.StatefulSet) string {
	for _, v := range ss.Spec.Template.Spec.Volumes {
		if v.ConfigMap == nil {
			continue
		}
		for _, o := range objs {
			if cm, ok := o.Obj.(*corev1.ConfigMap); ok && o.Name == v.ConfigMap.Name {
				if c, ok := cm.Data["nats.conf"]; ok {
					return c
				}
			}
		}
	}
	return ""
}

// isJob reports whether w is a Job's pod template (it runs to completion:
// no readiness or liveness probe).
func isJob(w workload) bool {
	_, ok := w.Obj.(*batchv1.Job)
	return ok
}

// jobTemplates adds Jobs to what podTemplates finds.
func jobTemplate(o Object) (workload, bool) {
	if j, ok := o.Obj.(*batchv1.Job); ok {
		return workload{o, &j.Spec.Template}, true
	}
	return workload{}, false
}

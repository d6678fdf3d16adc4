package check

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// Rules is what the cross-reference checks compare the manifests with.
type Rules struct {
	// TiltImages are the image names the Tiltfile builds (see TiltfileImages).
	TiltImages map[string]bool
	// ThirdPartyRepos are images used as published (e.g. "nats"); they must be
	// pinned to a tag other than latest.
	ThirdPartyRepos map[string]bool
	// External are ConfigMaps and Secrets created outside the manifests, as
	// "Secret/name" or "ConfigMap/name" (see ExternalRefs).
	External map[string]bool
}

var (
	tiltImageRE = regexp.MustCompile(`(?:image\s*=\s*|docker_build\(\s*)'([^']+)'\s*[,)]`)
	// The Tiltfile's pointer to the worker list.
	tiltWorkerListRE = regexp.MustCompile(`(?m)^WORKER_LIST\s*=\s*'([^']+)'`)
	workerNameRE     = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	// A Markdown table row or list item naming a resource in backticks.
	externalRE = regexp.MustCompile("`([a-z0-9][a-z0-9.-]*)`")
)

// TiltfileImages returns the images a Tiltfile builds: the literal first argument
// of docker_build calls, every image='...' keyword argument (a computed name,
// such as 'toolfleet-' + name, is not a literal and is not read) and, when it
// reads the worker list (WORKER_LIST = '...'), toolfleet-worker-NAME for each
// worker on it (see [WorkerList]). The list's path is relative to the
// Tiltfile's folder.
func TiltfileImages(path string) (map[string]bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, m := range tiltImageRE.FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = true
	}
	if m := tiltWorkerListRE.FindSubmatch(b); m != nil {
		if !bytes.Contains(b, []byte("read_yaml(WORKER_LIST)")) {
			return nil, fmt.Errorf("%s names WORKER_LIST but never reads it (read_yaml(WORKER_LIST))", path)
		}
		workers, err := WorkerList(filepath.Join(filepath.Dir(path), string(m[1])))
		if err != nil {
			return nil, err
		}
		for _, w := range workers {
			out["toolfleet-worker-"+w] = true
		}
	}
	return out, nil
}

// WorkerList reads the worker list, a kustomization whose resources are
// worker-NAME.yaml files (k8s/base/workers/kustomization.yaml), and returns the
// NAMEs in order. Any other entry is an error: the Tiltfile derives the Go
// package (./workers/NAME), the image (toolfleet-worker-NAME) and the workload
// (worker-NAME) from the file name.
func WorkerList(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var k struct {
		Resources []string `yaml:"resources"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []string
	for _, r := range k.Resources {
		name, ok := strings.CutPrefix(r, "worker-")
		name, ok2 := strings.CutSuffix(name, ".yaml")
		if !ok || !ok2 || !workerNameRE.MatchString(name) {
			return nil, fmt.Errorf("%s: resource %q is not worker-NAME.yaml (NAME: lower-case letters, digits, dashes)", path, r)
		}
		if slices.Contains(out, name) {
			return nil, fmt.Errorf("%s: worker %s listed twice", path, name)
		}
		out = append(out, name)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s lists no workers", path)
	}
	return out, nil
}

// ExternalRefs returns the Secrets and ConfigMaps that a Markdown document
// lists under a heading containing "External Secrets": every `name` in
// backticks in that section, until the next heading of the same or a higher
// level. kind is "Secret" for names in a section about Secrets.
func ExternalRefs(path string) (map[string]bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	level := 0
	for line := range strings.Lines(string(b)) {
		hashes := len(line) - len(strings.TrimLeft(line, "#"))
		if hashes > 0 && strings.HasPrefix(line[hashes:], " ") {
			switch {
			case strings.Contains(line, "External Secrets"):
				level = hashes
				continue
			case level > 0 && hashes <= level:
				level = 0
			}
		}
		if level == 0 {
			continue
		}
		for _, m := range externalRE.FindAllStringSubmatch(line, -1) {
			out["Secret/"+m[1]] = true
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s has no \"External Secrets\" section naming Secrets in backticks", path)
	}
	return out, nil
}

// Check runs every cross-reference and hardening check and returns the
// problems found, one sentence each.
func Check(objs []Object, rules Rules) []string {
	var p problems
	byKind := map[string]map[string]Object{}
	for _, o := range objs {
		if byKind[o.Kind] == nil {
			byKind[o.Kind] = map[string]Object{}
		}
		byKind[o.Kind][o.Name] = o
	}
	workloads := podTemplates(objs)
	for _, w := range workloads {
		checkPod(&p, w, byKind, rules)
	}
	for _, o := range objs {
		switch obj := o.Obj.(type) {
		case *corev1.Service:
			checkService(&p, o, obj, workloads)
		case *policyv1.PodDisruptionBudget:
			checkSelects(&p, o, obj.Spec.Selector, workloads)
		case *networkingv1.NetworkPolicy:
			checkSelects(&p, o, &obj.Spec.PodSelector, workloads)
			for _, in := range obj.Spec.Ingress {
				for _, peer := range in.From {
					if peer.PodSelector != nil && peer.NamespaceSelector == nil {
						checkSelects(&p, o, peer.PodSelector, workloads)
					}
				}
			}
		case *autoscalingv2.HorizontalPodAutoscaler:
			ref := obj.Spec.ScaleTargetRef
			if _, ok := byKind[ref.Kind][ref.Name]; !ok {
				p.add("%s scales %s/%s, which is not in the manifests", o, ref.Kind, ref.Name)
			}
		}
	}
	return p
}

type problems []string

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

// workload is a Deployment's, StatefulSet's or Job's pod template.
type workload struct {
	Object
	template *corev1.PodTemplateSpec
}

func podTemplates(objs []Object) []workload {
	var out []workload
	for _, o := range objs {
		switch obj := o.Obj.(type) {
		case *appsv1.Deployment:
			out = append(out, workload{o, &obj.Spec.Template})
		case *appsv1.StatefulSet:
			out = append(out, workload{o, &obj.Spec.Template})
		default:
			if w, ok := jobTemplate(o); ok {
				out = append(out, w)
			}
		}
	}
	return out
}

// checkSelects reports a selector that selects no workload's pods.
func checkSelects(p *problems, o Object, sel *metav1.LabelSelector, workloads []workload) {
	s, err := metav1.LabelSelectorAsSelector(sel)
	switch {
	case err != nil:
		p.add("%s: bad selector: %v", o, err)
		return
	case s.Empty():
		p.add("%s has an empty selector (it would select every pod)", o)
		return
	}
	for _, w := range workloads {
		if s.Matches(labels.Set(w.template.Labels)) {
			return
		}
	}
	p.add("%s selects %s, which matches no Deployment's or StatefulSet's pods", o, s)
}

func checkService(p *problems, o Object, svc *corev1.Service, workloads []workload) {
	if len(svc.Spec.Selector) == 0 {
		p.add("%s has no selector", o)
		return
	}
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	var matched []workload
	for _, w := range workloads {
		if sel.Matches(labels.Set(w.template.Labels)) {
			matched = append(matched, w)
		}
	}
	if len(matched) == 0 {
		p.add("%s selects %s, which matches no Deployment's or StatefulSet's pods", o, sel)
		return
	}
	for _, port := range svc.Spec.Ports {
		target := port.TargetPort
		if target.Type == intstr.Int && target.IntVal == 0 {
			target = intstr.FromInt32(port.Port)
		}
		for _, w := range matched {
			if !hasPort(w.template.Spec.Containers, target) {
				p.add("%s port %q targets %s, which no container of %s has", o, port.Name, target.String(), w.Object)
			}
		}
	}
}

func hasPort(containers []corev1.Container, port intstr.IntOrString) bool {
	for _, c := range containers {
		if containerHasPort(c, port) {
			return true
		}
	}
	return false
}

func containerHasPort(c corev1.Container, port intstr.IntOrString) bool {
	for _, cp := range c.Ports {
		if (port.Type == intstr.String && cp.Name == port.StrVal) || (port.Type == intstr.Int && cp.ContainerPort == port.IntVal) {
			return true
		}
	}
	return false
}

func checkPod(p *problems, w workload, byKind map[string]map[string]Object, rules Rules) {
	spec := w.template.Spec
	if sa := spec.ServiceAccountName; sa == "" {
		p.add("%s runs as the default ServiceAccount; give it its own", w.Object)
	} else if _, ok := byKind["ServiceAccount"][sa]; !ok {
		p.add("%s uses ServiceAccount %s, which is not in the manifests", w.Object, sa)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		p.add("%s mounts a Kubernetes API token it does not need (automountServiceAccountToken)", w.Object)
	}
	if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		p.add("%s does not set runAsNonRoot", w.Object)
	}
	volumes := map[string]bool{}
	if ss, ok := w.Obj.(*appsv1.StatefulSet); ok {
		for _, claim := range ss.Spec.VolumeClaimTemplates {
			volumes[claim.Name] = true
		}
	}
	for _, v := range spec.Volumes {
		volumes[v.Name] = true
		switch {
		case v.Secret != nil:
			checkRef(p, w.Object, "Secret", v.Secret.SecretName, v.Secret.Optional, byKind, rules)
		case v.ConfigMap != nil:
			checkRef(p, w.Object, "ConfigMap", v.ConfigMap.Name, v.ConfigMap.Optional, byKind, rules)
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.Secret != nil {
					checkRef(p, w.Object, "Secret", s.Secret.Name, s.Secret.Optional, byKind, rules)
				}
				if s.ConfigMap != nil {
					checkRef(p, w.Object, "ConfigMap", s.ConfigMap.Name, s.ConfigMap.Optional, byKind, rules)
				}
			}
		}
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		where := fmt.Sprintf("%s container %s", w.Object, c.Name)
		checkImage(p, where, c.Image, rules)
		checkContainerSecurity(p, where, c)
		for name, probe := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
			if probe == nil && (isJob(w) || runsToCompletion(spec, c)) {
				continue // a Job's pod or an init container runs to completion: nothing to probe
			}
			checkProbe(p, where, name, probe, c)
		}
		for _, ef := range c.EnvFrom {
			if ef.ConfigMapRef != nil {
				checkRef(p, w.Object, "ConfigMap", ef.ConfigMapRef.Name, ef.ConfigMapRef.Optional, byKind, rules)
			}
			if ef.SecretRef != nil {
				checkRef(p, w.Object, "Secret", ef.SecretRef.Name, ef.SecretRef.Optional, byKind, rules)
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
				checkKeyRef(p, w.Object, "ConfigMap", r.Name, r.Key, r.Optional, byKind, rules)
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil {
				checkKeyRef(p, w.Object, "Secret", r.Name, r.Key, r.Optional, byKind, rules)
			}
		}
		for _, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				p.add("%s mounts volume %s, which the pod does not define", where, m.Name)
			}
		}
	}
}

// runsToCompletion reports whether c is an init container that is not a
// sidecar (Kubernetes refuses probes on those: they run once, before the
// others start).
func runsToCompletion(spec corev1.PodSpec, c corev1.Container) bool {
	for _, ic := range spec.InitContainers {
		if ic.Name == c.Name {
			return ic.RestartPolicy == nil || *ic.RestartPolicy != corev1.ContainerRestartPolicyAlways
		}
	}
	return false
}

func checkProbe(p *problems, where, name string, probe *corev1.Probe, c corev1.Container) {
	if probe == nil {
		if name != "startup" {
			p.add("%s has no %s probe", where, name)
		}
		return
	}
	var port intstr.IntOrString
	switch {
	case probe.GRPC != nil:
		port = intstr.FromInt32(probe.GRPC.Port)
	case probe.HTTPGet != nil:
		port = probe.HTTPGet.Port
	case probe.TCPSocket != nil:
		port = probe.TCPSocket.Port
	default:
		return // exec probes have no port
	}
	if !containerHasPort(c, port) {
		p.add("%s %s probe uses port %s, which the container does not declare", where, name, port.String())
	}
}

func checkContainerSecurity(p *problems, where string, c corev1.Container) {
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		p.add("%s allows privilege escalation", where)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		p.add("%s has a writable root filesystem", where)
	}
	if sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		p.add("%s keeps its Linux capabilities (drop ALL)", where)
	}
	if _, ok := c.Resources.Requests[corev1.ResourceCPU]; !ok {
		p.add("%s requests no CPU", where)
	}
	if _, ok := c.Resources.Requests[corev1.ResourceMemory]; !ok {
		p.add("%s requests no memory", where)
	}
	if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
		p.add("%s has no memory limit", where)
	}
}

// checkImage: an image the Tiltfile builds (by its bare name, as in the kind
// overlay, or as registry/.../NAME:tag with toolfleet-NAME built, as in prod),
// or a third-party image pinned to a tag.
func checkImage(p *problems, where, image string, rules Rules) {
	repo, tag := splitImage(image)
	switch {
	case rules.TiltImages[repo]:
		return
	case rules.ThirdPartyRepos[repo]:
		if tag == "" || tag == "latest" {
			p.add("%s uses %s unpinned: name a version tag", where, image)
		}
		return
	}
	last := repo[strings.LastIndex(repo, "/")+1:]
	if strings.Contains(repo, "/") && rules.TiltImages["toolfleet-"+last] {
		if tag == "" || tag == "latest" {
			p.add("%s uses %s unpinned: name a release tag", where, image)
		}
		return
	}
	p.add("%s uses image %s, which the Tiltfile does not build and which is no known third-party image", where, image)
}

// splitImage splits "host:port/path/name:tag@digest" into repository and tag.
func splitImage(image string) (repo, tag string) {
	image, _, _ = strings.Cut(image, "@")
	slash := strings.LastIndex(image, "/")
	if colon := strings.LastIndex(image, ":"); colon > slash {
		return image[:colon], image[colon+1:]
	}
	return image, ""
}

func checkRef(p *problems, o Object, kind, name string, optional *bool, byKind map[string]map[string]Object, rules Rules) {
	if _, ok := byKind[kind][name]; ok || rules.External[kind+"/"+name] || (optional != nil && *optional) {
		return
	}
	p.add("%s references %s %s, which is neither in the manifests, optional, nor documented as external", o, kind, name)
}

func checkKeyRef(p *problems, o Object, kind, name, key string, optional *bool, byKind map[string]map[string]Object, rules Rules) {
	checkRef(p, o, kind, name, optional, byKind, rules)
	def, ok := byKind[kind][name]
	if !ok || (optional != nil && *optional) {
		return
	}
	var has bool
	switch obj := def.Obj.(type) {
	case *corev1.Secret:
		_, has = obj.Data[key]
		if !has {
			_, has = obj.StringData[key]
		}
	case *corev1.ConfigMap:
		_, has = obj.Data[key]
	}
	if !has {
		p.add("%s references key %s of %s %s, which has no such key", o, key, kind, name)
	}
}

package check

import (
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// good is a small, valid service in the shape of k8s/base; every case below
// breaks one thing in it, and the checks must notice.
const good = `apiVersion: v1
kind: ServiceAccount
metadata:
  name: svc
automountServiceAccountToken: false
---
apiVersion: v1
kind: Secret
metadata:
  name: svc-keys
stringData:
  token: dev
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: svc
spec:
  replicas: 2
  selector:
    matchLabels:
      app.kubernetes.io/name: svc
  template:
    metadata:
      labels:
        app.kubernetes.io/name: svc
    spec:
      serviceAccountName: svc
      automountServiceAccountToken: false
      securityContext:
        runAsNonRoot: true
      containers:
        - name: svc
          image: toolfleet-svc
          env:
            - name: TOKEN
              valueFrom:
                secretKeyRef:
                  name: svc-keys
                  key: token
          ports:
            - name: grpc
              containerPort: 9000
          readinessProbe:
            grpc:
              port: 9000
          livenessProbe:
            grpc:
              port: 9000
          resources:
            requests:
              cpu: 10m
              memory: 16Mi
            limits:
              memory: 64Mi
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: ["ALL"]
          volumeMounts:
            - name: tmp
              mountPath: /tmp
      volumes:
        - name: tmp
          emptyDir: {}
---
apiVersion: v1
kind: Service
metadata:
  name: svc
spec:
  selector:
    app.kubernetes.io/name: svc
  ports:
    - name: grpc
      port: 9000
      targetPort: grpc
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: svc
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: svc
  maxReplicas: 3
`

var testRules = Rules{
	TiltImages:      map[string]bool{"toolfleet-svc": true},
	ThirdPartyRepos: map[string]bool{"nats": true},
	External:        map[string]bool{"Secret/documented": true},
}

// buildString kustomize-builds one manifest file in memory.
func buildString(t *testing.T, manifest string) ([]Object, error) {
	t.Helper()
	fs := filesys.MakeFsInMemory()
	for name, content := range map[string]string{
		"/app/kustomization.yaml": "resources:\n  - svc.yaml\n",
		"/app/svc.yaml":           manifest,
	} {
		if err := fs.WriteFile(name, []byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	return Build(fs, "/app")
}

func TestGoodManifestPasses(t *testing.T) {
	t.Parallel()
	objs, err := buildString(t, good)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 5 {
		t.Fatalf("built %d objects, want 5", len(objs))
	}
	if p := Check(objs, testRules); len(p) > 0 {
		t.Fatalf("the good manifest has problems: %v", p)
	}
}

// TestStrictDecoding: kustomize passes these through; decoding against
// k8s.io/api must refuse them.
func TestStrictDecoding(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, old, new, want string
	}{
		{"mistyped field", "replicas: 2", `replicas: "two"`, "replicas"},
		{"misspelled field", "readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true", "unknown field"},
		{"field at the wrong level", "      serviceAccountName: svc", "      serviceAccount: svc\n      serviceAccountNam: svc", "unknown field"},
		{"probe port as a name", "grpc:\n              port: 9000\n          livenessProbe", "grpc:\n              port: grpc\n          livenessProbe", "port"},
		{"kind outside the allowed set", "kind: HorizontalPodAutoscaler", "kind: Ingress", "Ingress"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if !strings.Contains(good, tt.old) {
				t.Fatalf("the good manifest has no %q", tt.old)
			}
			_, err := buildString(t, strings.Replace(good, tt.old, tt.new, 1))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("build: %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}

// TestChecksCatch: each broken reference or missing hardening is reported.
func TestChecksCatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, old, new, want string
	}{
		{"image Tilt does not build", "image: toolfleet-svc", "image: toolfleet-other", "Tiltfile does not build"},
		{"third-party image unpinned", "image: toolfleet-svc", "image: nats:latest", "unpinned"},
		{"third-party image without tag", "image: toolfleet-svc", "image: nats", "unpinned"},
		{"released image without tag", "image: toolfleet-svc", "image: ghcr.io/toolfleet/svc", "unpinned"},
		{"service selects nothing", "  selector:\n    app.kubernetes.io/name: svc\n  ports", "  selector:\n    app.kubernetes.io/name: svx\n  ports", "matches no Deployment"},
		{"service targets a missing port", "targetPort: grpc", "targetPort: http", "no container"},
		{"probe on a missing port", "readinessProbe:\n            grpc:\n              port: 9000", "readinessProbe:\n            grpc:\n              port: 9001", "readiness probe uses port 9001"},
		{"no liveness probe", "          livenessProbe:\n            grpc:\n              port: 9000\n", "", "no liveness probe"},
		{"undefined secret", "name: svc-keys\n                  key", "name: svc-other\n                  key", "Secret svc-other"},
		{"missing secret key", "key: token", "key: tokn", "no such key"},
		{"undefined configmap", "          env:\n", "          envFrom:\n            - configMapRef:\n                name: nowhere\n          env:\n", "ConfigMap nowhere"},
		{"mount of an undefined volume", "- name: tmp\n              mountPath", "- name: scratch\n              mountPath", "volume scratch"},
		{"missing service account", "serviceAccountName: svc", "serviceAccountName: other", "ServiceAccount other"},
		{"HPA of a missing deployment", "    name: svc\n  maxReplicas", "    name: gone\n  maxReplicas", "Deployment/gone"},
		{"root allowed", "runAsNonRoot: true", "runAsNonRoot: false", "runAsNonRoot"},
		{"writable root fs", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", "writable root"},
		{"privilege escalation", "allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true", "privilege escalation"},
		{"capabilities kept", `drop: ["ALL"]`, `drop: ["NET_RAW"]`, "capabilities"},
		{"no memory limit", "            limits:\n              memory: 64Mi\n", "", "no memory limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if !strings.Contains(good, tt.old) {
				t.Fatalf("the good manifest has no %q", tt.old)
			}
			objs, err := buildString(t, strings.Replace(good, tt.old, tt.new, 1))
			if err != nil {
				t.Fatal(err)
			}
			problems := Check(objs, testRules)
			if !strings.Contains(strings.Join(problems, "\n"), tt.want) {
				t.Fatalf("problems %q, want one mentioning %q", problems, tt.want)
			}
		})
	}
}

// TestExternalAndOptionalRefsPass: a Secret documented as external, or
// referenced as optional, needs no definition.
func TestExternalAndOptionalRefsPass(t *testing.T) {
	t.Parallel()
	for _, ref := range []string{
		"name: documented\n                  key",
		"name: anything\n                  optional: true\n                  key",
	} {
		objs, err := buildString(t, strings.Replace(good, "name: svc-keys\n                  key", ref, 1))
		if err != nil {
			t.Fatal(err)
		}
		if p := Check(objs, testRules); len(p) > 0 {
			t.Errorf("%q: %v", ref, p)
		}
	}
}

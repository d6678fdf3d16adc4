package check

import (
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Object is one resource of a built overlay, decoded into its k8s.io/api type
// (*appsv1.Deployment, *corev1.Service, ...).
type Object struct {
	Kind, Name, Namespace string
	Obj                   runtime.Object
}

func (o Object) String() string { return o.Kind + "/" + o.Name }

// scheme holds the only types toolfleet's manifests may use: a resource of any
// other kind is an error, so a new kind is a deliberate change here.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme,
		autoscalingv2.AddToScheme, networkingv1.AddToScheme, batchv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// strict decodes JSON or YAML into typed objects and fails on unknown and
// duplicate fields as well as on mistyped values.
var strict = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme, scheme,
	kjson.SerializerOptions{Yaml: true, Strict: true})

// Decode decodes one resource strictly into its k8s.io/api type.
func Decode(data []byte) (runtime.Object, *schema.GroupVersionKind, error) {
	obj, gvk, err := strict.Decode(data, nil, nil)
	if err != nil {
		return nil, gvk, err // a strict decoding error comes with an object: never use it
	}
	return obj, gvk, nil
}

// Build runs kustomize on dir (an overlay or base) in fsys and decodes every
// resource it produces strictly. All decoding errors are returned together.
func Build(fsys filesys.FileSystem, dir string) ([]Object, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var objs []Object
	var errs []error
	for _, r := range m.Resources() {
		data, err := r.MarshalJSON()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s/%s: %w", r.GetKind(), r.GetName(), err))
			continue
		}
		obj, _, err := Decode(data)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s/%s: %w", r.GetKind(), r.GetName(), err))
			continue
		}
		objs = append(objs, Object{Kind: r.GetKind(), Name: r.GetName(), Namespace: r.GetNamespace(), Obj: obj})
	}
	return objs, errors.Join(errs...)
}

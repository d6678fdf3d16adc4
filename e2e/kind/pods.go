package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"
)

func (h *harness) checkPods(ctx context.Context) error {
	begin := time.Now()
	if err := h.waitReady(ctx, 10*time.Minute); err != nil {
		return err
	}
	pods, err := h.pods(ctx, "")
	if err != nil {
		return err
	}
	restarts := 0
	var restarted []string
	for _, p := range pods {
		if n := p.restarts(); n > 0 {
			restarts += n
			restarted = append(restarted, fmt.Sprintf("%s×%d", p.Metadata.Name, n))
		}
	}
	var deps struct {
		Items []struct {
			Metadata struct{ Name string }  `json:"metadata"`
			Spec     struct{ Replicas int } `json:"spec"`
			Status   struct {
				ReadyReplicas int `json:"readyReplicas"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := h.kubectlJSON(ctx, &deps, "get", "deployments"); err != nil {
		return err
	}
	for _, d := range deps.Items {
		if (d.Metadata.Name == "gateway" || d.Metadata.Name == "orchestrator") && d.Status.ReadyReplicas < 2 {
			return errf("deployment %s: %d ready replicas, want 2", d.Metadata.Name, d.Status.ReadyReplicas)
		}
		if d.Status.ReadyReplicas < d.Spec.Replicas {
			return errf("deployment %s: %d of %d replicas ready", d.Metadata.Name, d.Status.ReadyReplicas, d.Spec.Replicas)
		}
	}
	if err := h.oneTemporal(ctx); err != nil {
		return err
	}
	h.figure("%d pods ready (waited %s), %d container restarts %v", len(pods), time.Since(begin).Round(time.Second), restarts, restarted)
	return nil
}

// oneTemporal fails when the temporal Service selects pods of two
// controllers: the other overlay's Temporal left running (Tilt deletes no
// object of another overlay) splits the fleet between two Temporal servers,
// and runs started on one are never worked by orchestrators on the other.
func (h *harness) oneTemporal(ctx context.Context) error {
	var pods struct {
		Items []struct {
			Metadata struct {
				OwnerReferences []struct {
					Kind string `json:"kind"`
					Name string `json:"name"`
				} `json:"ownerReferences"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := h.kubectlJSON(ctx, &pods, "get", "pods", "-l", "app.kubernetes.io/name=temporal", "--field-selector", "status.phase=Running"); err != nil {
		return err
	}
	// By kind of controller: one overlay runs Temporal as a StatefulSet,
	// the other as a Deployment (whose rollout briefly has two ReplicaSets).
	owners := map[string]bool{}
	for _, p := range pods.Items {
		for _, o := range p.Metadata.OwnerReferences {
			owners[o.Kind] = true
		}
	}
	if len(owners) > 1 {
		return errf("two Temporal servers behind the temporal Service (%v): the other overlay's is left over; `tilt down`, or delete it, then run again", slices.Sorted(maps.Keys(owners)))
	}
	return nil
}

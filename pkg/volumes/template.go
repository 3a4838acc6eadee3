package volumes

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Annotations and labels of drainer Jobs and the PVCs they drain.
const (
	// DrainerTemplateAnnotation on a PVC, or on the StatefulSet whose volumeClaimTemplates made
	// it, holds the drainer Job to run on the PVC's data before its node goes down (and on the
	// orphaned PVCs of a scaled-down StatefulSet): JSON of a batch/v1 JobSpec
	// ({"template":{"spec":{"containers":[...]}}}) or of a whole Job ({"kind":"Job","spec":{...}}).
	// What it may ask for is bounded by Config.Drainers (DrainerPolicy).
	DrainerTemplateAnnotation = "edgedrain.io/drainer-template"
	// DrainStatusLabel is set to DrainStatusDrained on a PVC once its drainer succeeded, and
	// removed when the PVC is used again.
	DrainStatusLabel = "edgedrain.io/drain-status"
	// DrainStatusDrained is DrainStatusLabel's value on a drained PVC.
	DrainStatusDrained = "drained"
	// DeleteDrainedOrphansAnnotation set to "true" on a StatefulSet deletes its orphaned PVCs
	// once drained. Off by default: the data stays.
	DeleteDrainedOrphansAnnotation = "edgedrain.io/delete-drained-orphans"
	// DrainerLabel is set to "true" on drainer Jobs and their pods.
	DrainerLabel = "edgedrain.io/drainer"
	// DrainerPVCAnnotation on a drainer Job names its PVC ("namespace/name").
	DrainerPVCAnnotation = "edgedrain.io/pvc"
	// DrainerNodeAnnotation on a drainer Job names the node it was pinned to ("" for none).
	DrainerNodeAnnotation = "edgedrain.io/node"
	// DrainerTriggerAnnotation on a drainer Job says why it runs: TriggerNodeDrain or TriggerOrphan.
	DrainerTriggerAnnotation = "edgedrain.io/trigger"
	// DrainerVolumeName is the pod volume the gate adds for the PVC; a container that does not
	// mount it gets it at DrainerMountPath.
	DrainerVolumeName = "edgedrain-data"
	// DrainerMountPath is where the PVC is mounted in containers that do not mount it themselves.
	DrainerMountPath = "/data"
)

// Why a drainer Job runs, the values of DrainerTriggerAnnotation.
const (
	// TriggerNodeDrain marks a drainer run on a node-local PVC because its node is drained.
	TriggerNodeDrain = "node-drain"
	// TriggerOrphan marks a drainer run on an orphaned PVC of a scaled-down StatefulSet.
	TriggerOrphan = "orphan"
)

// unschedulableTaint is the taint of a cordoned node; drainer pods tolerate it.
const unschedulableTaint = "node.kubernetes.io/unschedulable"

// DrainerTemplate is a parsed DrainerTemplateAnnotation: the Job's spec and the labels and
// annotations its metadata asked for.
type DrainerTemplate struct {
	Labels, Annotations map[string]string
	Spec                batchv1.JobSpec
}

// ParseDrainerTemplate decodes a DrainerTemplateAnnotation value strictly (unknown fields are
// errors) and checks that it can run: at least one container, each with a name and an image,
// and a restart policy a Job accepts. Errors match ErrInvalidTemplate.
func ParseDrainerTemplate(s string) (DrainerTemplate, error) {
	var t DrainerTemplate
	s = strings.TrimSpace(s)
	if s == "" {
		return t, fmt.Errorf("%w: empty", ErrInvalidTemplate)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &keys); err != nil {
		return t, fmt.Errorf("%w: want a JSON object (a batch/v1 JobSpec or Job): %w", ErrInvalidTemplate, err)
	}
	_, hasSpec := keys["spec"]
	_, hasKind := keys["kind"]
	if hasSpec || hasKind {
		var job batchv1.Job
		if err := strictJSON(s, &job); err != nil {
			return t, fmt.Errorf("%w: as a Job: %w", ErrInvalidTemplate, err)
		}
		if job.Kind != "" && job.Kind != "Job" {
			return t, fmt.Errorf("%w: kind %q, want Job", ErrInvalidTemplate, job.Kind)
		}
		t.Labels, t.Annotations, t.Spec = job.Labels, job.Annotations, job.Spec
	} else if err := strictJSON(s, &t.Spec); err != nil {
		return t, fmt.Errorf("%w: as a JobSpec: %w", ErrInvalidTemplate, err)
	}
	pod := t.Spec.Template.Spec
	var problems []string
	if len(pod.Containers) == 0 {
		problems = append(problems, "template.spec.containers is empty")
	}
	for i, c := range pod.Containers {
		if c.Name == "" || c.Image == "" {
			problems = append(problems, fmt.Sprintf("container %d needs a name and an image", i))
		}
	}
	switch pod.RestartPolicy {
	case "", corev1.RestartPolicyNever, corev1.RestartPolicyOnFailure:
	default:
		problems = append(problems, fmt.Sprintf("restartPolicy %q: a Job wants Never or OnFailure", pod.RestartPolicy))
	}
	if len(problems) > 0 {
		return t, fmt.Errorf("%w: %s", ErrInvalidTemplate, strings.Join(problems, "; "))
	}
	return t, nil
}

func strictJSON(s string, into any) error {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// drainerJobName is the one name of pvc's drainer Job: a PVC has at most one at a time.
func drainerJobName(pvc *corev1.PersistentVolumeClaim) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(pvc.Namespace + "/" + pvc.Name))
	base := strings.Trim(strings.ReplaceAll(pvc.Name, ".", "-"), "-")
	if len(base) > 40 {
		base = strings.TrimRight(base[:40], "-")
	}
	return fmt.Sprintf("drainer-%s-%08x", base, h.Sum32())
}

// buildJob makes pvc's drainer Job from t: in pvc's namespace, owned by pvc, mounting it,
// pinned to node (when not "") despite its cordon, bounded by timeout.
func buildJob(t DrainerTemplate, pvc *corev1.PersistentVolumeClaim, node, trigger string, timeout time.Duration) *batchv1.Job {
	spec := *t.Spec.DeepCopy()
	pod := &spec.Template.Spec
	labels := map[string]string{}
	for k, v := range t.Labels {
		labels[k] = v
	}
	labels[DrainerLabel] = "true"
	annotations := map[string]string{}
	for k, v := range t.Annotations {
		annotations[k] = v
	}
	annotations[DrainerPVCAnnotation] = pvc.Namespace + "/" + pvc.Name
	annotations[DrainerNodeAnnotation] = node
	annotations[DrainerTriggerAnnotation] = trigger
	if spec.Template.Labels == nil {
		spec.Template.Labels = map[string]string{}
	}
	spec.Template.Labels[DrainerLabel] = "true"
	// A Job's generated selector is used: a template selector would be refused without manualSelector.
	spec.Selector, spec.ManualSelector = nil, nil
	// The gate removes the Job itself once it has seen how it ended, and it must run.
	spec.TTLSecondsAfterFinished, spec.Suspend = nil, nil
	if pod.RestartPolicy == "" {
		pod.RestartPolicy = corev1.RestartPolicyNever
	}
	if spec.BackoffLimit == nil {
		zero := int32(0) // the gate retries with its own backoff
		spec.BackoffLimit = &zero
	}
	deadline := int64(timeout / time.Second)
	if spec.ActiveDeadlineSeconds == nil || *spec.ActiveDeadlineSeconds > deadline {
		spec.ActiveDeadlineSeconds = &deadline
	}
	if node != "" {
		pod.NodeName = node
		pod.Affinity, pod.NodeSelector = nil, nil
	}
	pod.Tolerations = append(pod.Tolerations, corev1.Toleration{Key: unschedulableTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	volume := corev1.Volume{Name: DrainerVolumeName, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name}}}
	replaced := false
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == DrainerVolumeName {
			pod.Volumes[i], replaced = volume, true
		}
	}
	if !replaced {
		pod.Volumes = append(pod.Volumes, volume)
	}
	env := []corev1.EnvVar{
		{Name: "EDGEDRAIN_PVC_NAMESPACE", Value: pvc.Namespace}, {Name: "EDGEDRAIN_PVC_NAME", Value: pvc.Name},
		{Name: "EDGEDRAIN_NODE", Value: node}, {Name: "EDGEDRAIN_TRIGGER", Value: trigger},
	}
	for i := range pod.Containers {
		c := &pod.Containers[i]
		mounted := false
		for _, m := range c.VolumeMounts {
			mounted = mounted || m.Name == DrainerVolumeName
		}
		if !mounted {
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: DrainerVolumeName, MountPath: DrainerMountPath})
		}
		c.Env = append(c.Env, env...)
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: drainerJobName(pvc), Namespace: pvc.Namespace, Labels: labels, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "PersistentVolumeClaim", Name: pvc.Name, UID: pvc.UID}},
		},
		Spec: spec,
	}
}

// templateHash identifies a template value, so that one bad value is reported once.
func templateHash(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(bytes.TrimSpace([]byte(s)))
	return h.Sum64()
}

package volumes

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const jobSpecTemplate = `{"template":{"spec":{"containers":[{"name":"sync","image":"registry.invalid/sync:1","args":["upload","/data"]}]}}}`

func TestParseDrainerTemplate(t *testing.T) {
	tests := []struct {
		name, in, err string
	}{
		{name: "job spec", in: jobSpecTemplate},
		{name: "whole job", in: `{"apiVersion":"batch/v1","kind":"Job","metadata":{"labels":{"team":"a"}},"spec":` + jobSpecTemplate + `}`},
		{name: "empty", in: "  ", err: "invalid drainer template: empty"},
		{name: "not json", in: "upload: /data", err: "want a JSON object"},
		{name: "array", in: `[1]`, err: "want a JSON object"},
		{name: "unknown field", in: `{"template":{"spec":{"containerz":[]}}}`, err: `unknown field "containerz"`},
		{name: "wrong type", in: `{"backoffLimit":"three"}`, err: "as a JobSpec"},
		{name: "no containers", in: `{"template":{"spec":{}}}`, err: "template.spec.containers is empty"},
		{name: "container without image", in: `{"template":{"spec":{"containers":[{"name":"x"}]}}}`, err: "container 0 needs a name and an image"},
		{name: "restart always", in: `{"template":{"spec":{"restartPolicy":"Always","containers":[{"name":"x","image":"y"}]}}}`, err: "restartPolicy \"Always\""},
		{name: "other kind", in: `{"kind":"Pod","spec":{}}`, err: `kind "Pod", want Job`},
		{name: "trailing data", in: jobSpecTemplate + ` {}`, err: "after top-level value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseDrainerTemplate(tt.in)
			if tt.err != "" {
				require.ErrorIs(t, err, ErrInvalidTemplate)
				assert.Contains(t, err.Error(), tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, "sync", got.Spec.Template.Spec.Containers[0].Name)
		})
	}
}

func TestBuildJob(t *testing.T) {
	tmpl, err := ParseDrainerTemplate(`{"kind":"Job","metadata":{"labels":{"team":"a"}},"spec":{"activeDeadlineSeconds":99999,` +
		`"ttlSecondsAfterFinished":0,"suspend":true,` +
		`"template":{"spec":{"nodeSelector":{"x":"y"},"containers":[{"name":"a","image":"i"},` +
		`{"name":"b","image":"i","volumeMounts":[{"name":"edgedrain-data","mountPath":"/in"}]}]}}}}`)
	require.NoError(t, err)
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "shop",
		Name: "data.db-0-with-a-really-long-name-that-goes-on-and-on-and-on", UID: "uid-1"}}
	job := buildJob(tmpl, pvc, "edge-1", TriggerNodeDrain, 10*time.Minute)

	assert.Empty(t, validation.NameIsDNSLabel(job.Name, false), "a Job name fit for its pods' job-name label: %s", job.Name)
	assert.Equal(t, job.Name, buildJob(tmpl, pvc, "", TriggerOrphan, time.Minute).Name, "one name per PVC")
	assert.Equal(t, "shop", job.Namespace)
	assert.Equal(t, map[string]string{"team": "a", DrainerLabel: "true"}, job.Labels)
	assert.Equal(t, "shop/"+pvc.Name, job.Annotations[DrainerPVCAnnotation])
	assert.Equal(t, "edge-1", job.Annotations[DrainerNodeAnnotation])
	assert.Equal(t, pvc.UID, job.OwnerReferences[0].UID)
	assert.Equal(t, int64(600), *job.Spec.ActiveDeadlineSeconds, "bounded by the gate's timeout")
	assert.Equal(t, int32(0), *job.Spec.BackoffLimit)
	assert.Nil(t, job.Spec.TTLSecondsAfterFinished, "the gate must see how it ended")
	assert.Nil(t, job.Spec.Suspend)

	pod := job.Spec.Template.Spec
	assert.Equal(t, "edge-1", pod.NodeName, "pinned to the node")
	assert.Nil(t, pod.NodeSelector)
	assert.Equal(t, corev1.RestartPolicyNever, pod.RestartPolicy)
	assert.Equal(t, "true", job.Spec.Template.Labels[DrainerLabel])
	assert.Contains(t, pod.Tolerations, corev1.Toleration{Key: "node.kubernetes.io/unschedulable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	require.Len(t, pod.Volumes, 1)
	assert.Equal(t, pvc.Name, pod.Volumes[0].PersistentVolumeClaim.ClaimName)
	assert.Equal(t, []corev1.VolumeMount{{Name: DrainerVolumeName, MountPath: DrainerMountPath}}, pod.Containers[0].VolumeMounts)
	assert.Equal(t, []corev1.VolumeMount{{Name: DrainerVolumeName, MountPath: "/in"}}, pod.Containers[1].VolumeMounts, "a mount of its own is kept")
	assert.Contains(t, pod.Containers[0].Env, corev1.EnvVar{Name: "EDGEDRAIN_NODE", Value: "edge-1"})

	assert.Empty(t, tmpl.Spec.Template.Spec.Volumes, "the parsed template is not changed")
}

func TestBackoff(t *testing.T) {
	for failures, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 10: 5 * time.Second} {
		assert.Equal(t, want, backoff(failures, time.Second, 5*time.Second), "failures=%d", failures)
	}
}

func TestClaimOrdinal(t *testing.T) {
	sts := statefulSet("shop", "web", 2, "")
	for claim, want := range map[string]int{"data-web-0": 0, "data-web-12": 12} {
		got, ok := claimOrdinal(sts, claim)
		assert.True(t, ok, claim)
		assert.Equal(t, want, got, claim)
	}
	for _, claim := range []string{"data-web-", "data-web-01", "data-web-x", "data-webby-0", "logs-web-0", "data-web-0-1"} {
		_, ok := claimOrdinal(sts, claim)
		assert.False(t, ok, claim)
	}
}

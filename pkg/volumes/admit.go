package volumes

import (
	"strings"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// refusedPrefix starts the report keys of refused templates, followed by the PVC's UID.
const refusedPrefix = "refused/"

// admitTemplate parses pvc's drainer template from src and checks it against the DrainerPolicy
// and the PVC's namespace: it returns the template to run, or why none runs. An invalid
// template is reported by parseTemplate on the object carrying it; a refused one is reported
// here on the PVC (Event DrainerTemplateRefused, metric, log), once per template value and
// reason however often it is checked.
func (g *Gate) admitTemplate(src templateSource, pvc *corev1.PersistentVolumeClaim) (DrainerTemplate, error) {
	t, err := g.parseTemplate(src)
	if err != nil {
		return t, err
	}
	key := refusedPrefix + string(pvc.UID)
	if err = g.policyProblem(t, pvc); err == nil {
		g.forgetReport(key)
		return g.cfg.Drainers.apply(t), nil
	}
	if g.reportOnce(key, src.raw+"\x00"+err.Error()) {
		g.metrics.TemplatesRefused.Inc()
		g.log.WithFields(logrus.Fields{"pvc": pvc.Namespace + "/" + pvc.Name, "object": src.where}).WithError(err).Warn("drainer template refused")
		g.event(pvcRef(pvc), corev1.EventTypeWarning, "DrainerTemplateRefused", "annotation %s on %s: %v; no drainer Job is created",
			DrainerTemplateAnnotation, src.where, err)
	}
	return t, err
}

// policyProblem says why the DrainerPolicy refuses template t for pvc (its namespace first),
// nil when it allows it.
func (g *Gate) policyProblem(t DrainerTemplate, pvc *corev1.PersistentVolumeClaim) error {
	var problems []string
	if ok, why := g.namespaceAllowed(pvc.Namespace); !ok {
		problems = append(problems, why)
	}
	if problems = append(problems, g.cfg.Drainers.problems(t)...); len(problems) == 0 {
		return nil
	}
	return refused(problems)
}

// namespaceAllowed reports whether drainers may run in namespace ns, else why not.
func (g *Gate) namespaceAllowed(ns string) (bool, string) {
	var nsLabels labels.Labels
	if g.namespaces != nil {
		if obj, err := g.namespaces.Get(ns); err == nil {
			nsLabels = labels.Set(obj.Labels)
		}
	}
	return g.cfg.Drainers.namespaceAllowed(ns, nsLabels, g.nsSelector)
}

// reportOnce records that what was reported about key and says whether it is new: a problem
// is reported once per key and value, not at every check.
func (g *Gate) reportOnce(key, what string) bool {
	h := templateHash(what)
	g.badMu.Lock()
	defer g.badMu.Unlock()
	fresh := g.bad[key] != h
	g.bad[key] = h
	return fresh
}

// forgetReport forgets what was reported about key (the problem is gone), so that it is
// reported again should it come back.
func (g *Gate) forgetReport(key string) {
	g.badMu.Lock()
	defer g.badMu.Unlock()
	delete(g.bad, key)
}

// forgetGoneReports forgets the refusals reported about PVCs whose UIDs are not in exists.
func (g *Gate) forgetGoneReports(exists map[string]bool) {
	g.badMu.Lock()
	defer g.badMu.Unlock()
	for key := range g.bad {
		if uid, ok := strings.CutPrefix(key, refusedPrefix); ok && !exists[uid] {
			delete(g.bad, key)
		}
	}
}

// orphanDeletionOff reports, once per StatefulSet, that its DeleteDrainedOrphansAnnotation is
// ignored because Config.DeleteDrainedOrphans is off.
func (g *Gate) orphanDeletionOff(sts *appsv1.StatefulSet) {
	if !g.reportOnce("no-delete/"+string(sts.UID), "off") {
		return
	}
	g.log.WithField("statefulset", sts.Namespace+"/"+sts.Name).Infof("%s=true ignored: orphan deletion is off", DeleteDrainedOrphansAnnotation)
	g.event(stsRef(sts), corev1.EventTypeWarning, "OrphanDeletionDisabled",
		"annotation %s=true ignored: the coordinator runs without --delete-drained-orphans, drained orphaned PVCs are kept", DeleteDrainedOrphansAnnotation)
}

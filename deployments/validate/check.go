package validate

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Targets are the commands of the binary that run targets.
var Targets = []string{"fetcher", "dispatcher", "worker", "aggregator", "gateway", "run"}

// ServiceTargets are the targets a deployment runs each as its own service: all of Targets but
// run.
var ServiceTargets = []string{"fetcher", "dispatcher", "worker", "aggregator", "gateway"}

// CheckOptions describe what a rendered chart may refer to without rendering it.
type CheckOptions struct {
	// Namespace is the release namespace.
	Namespace string
	// ExternalSecrets are Secrets managed outside the chart: name → keys the chart may read.
	ExternalSecrets map[string][]string
	// ExternalServiceAccounts are service accounts managed outside the chart.
	ExternalServiceAccounts []string
}

// placeholders stand in for values of external Secrets when the settings are loaded.
var placeholders = map[string]string{
	"BULKACTION_NATS_URL":  "nats://user:password@nats:4222",
	"BULKACTION_REDIS_URL": "redis://:password@redis:6379/0",
}

type index struct {
	deployments     []*appsv1.Deployment
	services        []*corev1.Service
	configMaps      map[string]*corev1.ConfigMap
	secrets         map[string]*corev1.Secret
	serviceAccounts map[string]bool
	pdbs            []*policyv1.PodDisruptionBudget
	hpas            []*autoscalingv2.HorizontalPodAutoscaler
	scaledObjects   []*ScaledObject
	monitors        []*ServiceMonitor
	policies        []*networkingv1.NetworkPolicy
	ingresses       []*networkingv1.Ingress
}

// Check cross-checks decoded objects: selectors match the pods they are meant for, ports and
// probes agree, references resolve, every BULKACTION_* variable is a setting and the settings
// of every container pass the binary's own validation.
func Check(objs []Object, opt CheckOptions) error {
	ix := index{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}, serviceAccounts: map[string]bool{"default": true}}
	for _, sa := range opt.ExternalServiceAccounts {
		ix.serviceAccounts[sa] = true
	}
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	seen := map[string]bool{}
	for _, o := range objs {
		key := o.Kind + "/" + o.Name
		if seen[key] {
			fail("%s: rendered twice", key)
		}
		seen[key] = true
		switch v := o.Obj.(type) {
		case *appsv1.Deployment:
			ix.deployments = append(ix.deployments, v)
		case *corev1.Service:
			ix.services = append(ix.services, v)
		case *corev1.ConfigMap:
			ix.configMaps[v.Name] = v
		case *corev1.Secret:
			ix.secrets[v.Name] = v
		case *corev1.ServiceAccount:
			ix.serviceAccounts[v.Name] = true
		case *policyv1.PodDisruptionBudget:
			ix.pdbs = append(ix.pdbs, v)
		case *autoscalingv2.HorizontalPodAutoscaler:
			ix.hpas = append(ix.hpas, v)
		case *ScaledObject:
			ix.scaledObjects = append(ix.scaledObjects, v)
		case *ServiceMonitor:
			ix.monitors = append(ix.monitors, v)
		case *networkingv1.NetworkPolicy:
			ix.policies = append(ix.policies, v)
		case *networkingv1.Ingress:
			ix.ingresses = append(ix.ingresses, v)
		default:
			fail("%s: kind %s is not expected from this chart", o, o.Kind)
		}
	}
	if len(ix.deployments) == 0 {
		fail("no Deployment rendered")
	}

	autoscaled := map[string][2]int32{} // Deployment → min, max replicas
	for _, h := range ix.hpas {
		if h.Spec.ScaleTargetRef.Kind != "Deployment" || ix.deployment(h.Spec.ScaleTargetRef.Name) == nil {
			fail("HorizontalPodAutoscaler %s: target %s %s is not rendered", h.Name, h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name)
			continue
		}
		minR := int32(1)
		if h.Spec.MinReplicas != nil {
			minR = *h.Spec.MinReplicas
		}
		if minR > h.Spec.MaxReplicas || len(h.Spec.Metrics) == 0 {
			fail("HorizontalPodAutoscaler %s: minReplicas %d > maxReplicas %d, or no metric", h.Name, minR, h.Spec.MaxReplicas)
		}
		autoscaled[h.Spec.ScaleTargetRef.Name] = [2]int32{minR, h.Spec.MaxReplicas}
		// Utilization of a resource is measured against its request: without one the HPA
		// cannot compute it and never scales.
		for _, m := range h.Spec.Metrics {
			if m.Type != autoscalingv2.ResourceMetricSourceType || m.Resource == nil || m.Resource.Target.Type != autoscalingv2.UtilizationMetricType {
				continue
			}
			for _, c := range ix.deployment(h.Spec.ScaleTargetRef.Name).Spec.Template.Spec.Containers {
				if _, ok := c.Resources.Requests[m.Resource.Name]; !ok {
					fail("HorizontalPodAutoscaler %s: scales on %s utilization, but container %s requests no %s", h.Name, m.Resource.Name, c.Name, m.Resource.Name)
				}
			}
		}
	}
	for _, s := range ix.scaledObjects {
		ref := s.Spec.ScaleTargetRef
		if (ref.Kind != "" && ref.Kind != "Deployment") || ix.deployment(ref.Name) == nil {
			fail("ScaledObject %s: target %s %s is not rendered", s.Name, ref.Kind, ref.Name)
			continue
		}
		minR, maxR := int32(0), int32(100) // KEDA's defaults
		if s.Spec.MinReplicaCount != nil {
			minR = *s.Spec.MinReplicaCount
		}
		if s.Spec.MaxReplicaCount != nil {
			maxR = *s.Spec.MaxReplicaCount
		}
		if minR > maxR {
			fail("ScaledObject %s: minReplicaCount %d > maxReplicaCount %d", s.Name, minR, maxR)
		}
		if _, dup := autoscaled[ref.Name]; dup {
			fail("Deployment %s: autoscaled twice", ref.Name)
		}
		autoscaled[ref.Name] = [2]int32{minR, maxR}
	}

	envs := map[string]map[string]string{} // Deployment → its container's settings
	for _, d := range ix.deployments {
		where := "Deployment " + d.Name
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		switch {
		case err != nil:
			fail("%s: selector: %v", where, err)
			continue
		case sel.Empty():
			fail("%s: empty selector", where)
		case !sel.Matches(labels.Set(d.Spec.Template.Labels)):
			fail("%s: selector %s does not match its pod labels %v", where, sel, d.Spec.Template.Labels)
		}
		for _, other := range ix.deployments {
			if other != d && sel.Matches(labels.Set(other.Spec.Template.Labels)) {
				fail("%s: selector %s also matches the pods of Deployment %s", where, sel, other.Name)
			}
		}
		if _, ok := autoscaled[d.Name]; ok && d.Spec.Replicas != nil {
			fail("%s: sets replicas although autoscaled (every upgrade would reset them)", where)
		} else if !ok && d.Spec.Replicas == nil {
			fail("%s: no replicas and no autoscaler", where)
		}
		pod := d.Spec.Template.Spec
		if !ix.serviceAccounts[pod.ServiceAccountName] && pod.ServiceAccountName != "" {
			fail("%s: service account %s is not rendered", where, pod.ServiceAccountName)
		}
		if len(pod.Containers) == 0 {
			fail("%s: no container", where)
			continue
		}
		for _, c := range pod.Containers {
			cw := where + " container " + c.Name
			if c.Image == "" || strings.HasSuffix(c.Image, ":") {
				fail("%s: image %q", cw, c.Image)
			}
			cmd := append(slices.Clone(c.Command), c.Args...)
			if len(cmd) == 0 || !slices.Contains(Targets, cmd[0]) {
				fail("%s: command %v does not start with a target (%s)", cw, cmd, strings.Join(Targets, ", "))
			}
			for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
				if p == nil {
					if name != "startup" {
						fail("%s: no %s probe", cw, name)
					}
					continue
				}
				if p.HTTPGet == nil {
					fail("%s: %s probe is not an HTTP GET", cw, name)
					continue
				}
				if !containerHasPort(c, p.HTTPGet.Port) {
					fail("%s: %s probe port %s is not a container port", cw, name, p.HTTPGet.Port.String())
				}
				want := map[string]string{"liveness": "/healthz", "readiness": "/readyz", "startup": "/healthz"}[name]
				if p.HTTPGet.Path != want {
					fail("%s: %s probe path %s, want %s", cw, name, p.HTTPGet.Path, want)
				}
			}
			names := map[string]bool{}
			for _, e := range c.Env {
				if names[e.Name] {
					fail("%s: env %s set twice (the last one wins silently)", cw, e.Name)
				}
				names[e.Name] = true
			}
			env, err := ix.containerEnv(c, opt)
			if err != nil {
				fail("%s: %v", cw, err)
				continue
			}
			if isGateway(c) {
				if err := ix.checkGateway(d, c, env, opt); err != nil {
					errs = append(errs, err)
				}
			}
			if err := CheckValues(cw, env); err != nil {
				errs = append(errs, err)
			}
			envs[d.Name] = env
			if addr := env["BULKACTION_HTTP_ADDR"]; addr != "" {
				_, port, _ := strings.Cut(addr, ":")
				if n, err := strconv.Atoi(port); err != nil || !containerHasPort(c, intstr.FromInt32(int32(n))) {
					fail("%s: BULKACTION_HTTP_ADDR %s is not a container port", cw, addr)
				}
			}
			grace := int64(30000)
			if v, ok := env["BULKACTION_SHUTDOWN_GRACE_PERIOD_MS"]; ok {
				grace, _ = strconv.ParseInt(v, 10, 64)
			}
			if tg := pod.TerminationGracePeriodSeconds; tg == nil || *tg*1000 <= grace {
				fail("%s: terminationGracePeriodSeconds must exceed SHUTDOWN_GRACE_PERIOD_MS (%d ms)", cw, grace)
			}
		}
	}

	// PodDisruptionBudgets: exactly the Deployments that always run more than one pod.
	for _, p := range ix.pdbs {
		ds := ix.selected(p.Spec.Selector, "PodDisruptionBudget "+p.Name, &errs)
		if len(ds) == 0 {
			fail("PodDisruptionBudget %s: selects no Deployment's pods", p.Name)
		}
		for _, d := range ds {
			if minReplicas(d, autoscaled) <= 1 {
				fail("PodDisruptionBudget %s: Deployment %s runs %d replica(s): the budget would block every drain", p.Name, d.Name, minReplicas(d, autoscaled))
			}
		}
	}
	for _, d := range ix.deployments {
		if minReplicas(d, autoscaled) <= 1 {
			continue
		}
		covered := false
		for _, p := range ix.pdbs {
			if sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector); err == nil && sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				covered = true
			}
		}
		if !covered {
			fail("Deployment %s: %d replicas and no PodDisruptionBudget", d.Name, minReplicas(d, autoscaled))
		}
	}

	for _, s := range ix.services {
		where := "Service " + s.Name
		if len(s.Spec.Selector) == 0 {
			fail("%s: no selector", where)
			continue
		}
		sel := labels.SelectorFromSet(s.Spec.Selector)
		var ds []*appsv1.Deployment
		for _, d := range ix.deployments {
			if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				ds = append(ds, d)
			}
		}
		if len(ds) == 0 {
			fail("%s: selector %s matches no Deployment's pods", where, sel)
		}
		for _, p := range s.Spec.Ports {
			tp := p.TargetPort
			if tp.Type == intstr.Int && tp.IntVal == 0 {
				tp = intstr.FromInt32(p.Port)
			}
			for _, d := range ds {
				if !podHasPort(d.Spec.Template.Spec, tp) {
					fail("%s: port %s targets %s, which Deployment %s does not expose", where, p.Name, tp.String(), d.Name)
				}
			}
		}
	}

	for _, m := range ix.monitors {
		where := "ServiceMonitor " + m.Name
		sel, err := metav1.LabelSelectorAsSelector(&m.Spec.Selector)
		if err != nil {
			fail("%s: %v", where, err)
			continue
		}
		if !m.Spec.NamespaceSelector.Any && !slices.Contains(m.Spec.NamespaceSelector.MatchNames, opt.Namespace) {
			fail("%s: does not look in namespace %s", where, opt.Namespace)
		}
		n := 0
		for _, s := range ix.services {
			if !sel.Matches(labels.Set(s.Labels)) {
				continue
			}
			n++
			for _, e := range m.Spec.Endpoints {
				if !slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == e.Port }) {
					fail("%s: endpoint port %s is not a port of Service %s", where, e.Port, s.Name)
				}
			}
		}
		if n == 0 {
			fail("%s: selector %s matches no Service", where, sel)
		}
	}

	// With ServiceMonitors, every Deployment's metrics port is scraped by one.
	if len(ix.monitors) > 0 {
		for _, d := range ix.deployments {
			if !ix.scraped(d, envs[d.Name]) {
				fail("Deployment %s: no ServiceMonitor scrapes its metrics port (BULKACTION_HTTP_ADDR)", d.Name)
			}
		}
	}

	if err := ix.checkIngresses(envs); err != nil {
		errs = append(errs, err)
	}

	for _, np := range ix.policies {
		where := "NetworkPolicy " + np.Name
		ds := ix.selected(&np.Spec.PodSelector, where, &errs)
		if len(ds) == 0 {
			fail("%s: selects no Deployment's pods", where)
		}
		for _, r := range np.Spec.Ingress {
			for _, p := range r.Ports {
				if p.Port == nil {
					continue
				}
				for _, d := range ds {
					if !podHasPort(d.Spec.Template.Spec, *p.Port) {
						fail("%s: ingress port %s is not a port of Deployment %s", where, p.Port.String(), d.Name)
					}
				}
			}
		}
	}

	// READY's capacity must cover every worker slot, or the added workers idle.
	workers := int32(0)
	for _, d := range ix.deployments {
		if len(d.Spec.Template.Spec.Containers) > 0 && slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "worker") {
			if r, ok := autoscaled[d.Name]; ok {
				workers += r[1]
			} else if d.Spec.Replicas != nil {
				workers += *d.Spec.Replicas
			}
		}
	}
	for _, d := range ix.deployments {
		env := envs[d.Name]
		if env == nil || env["BULKACTION_READY_QUEUE_MAX_SIZE"] != "" {
			continue
		}
		inst := int32(1)
		if v, ok := env["BULKACTION_WORKER_INSTANCES"]; ok {
			n, _ := strconv.Atoi(v)
			inst = int32(n)
		}
		if inst < workers {
			fail("Deployment %s: BULKACTION_WORKER_INSTANCES=%d but up to %d worker pods run: READY's capacity would not cover their slots", d.Name, inst, workers)
		}
	}
	return errors.Join(errs...)
}

// scraped reports whether a ServiceMonitor selects a Service that selects d's pods, with an
// endpoint on a port that targets d's metrics port (the port of env's BULKACTION_HTTP_ADDR).
func (ix *index) scraped(d *appsv1.Deployment, env map[string]string) bool {
	addr := env["BULKACTION_HTTP_ADDR"]
	if addr == "" {
		addr = ":8080"
	}
	mp, err := addrPort(addr)
	if err != nil || len(d.Spec.Template.Spec.Containers) == 0 {
		return false
	}
	c := d.Spec.Template.Spec.Containers[0]
	for _, m := range ix.monitors {
		sel, err := metav1.LabelSelectorAsSelector(&m.Spec.Selector)
		if err != nil {
			continue
		}
		for _, s := range ix.services {
			if !sel.Matches(labels.Set(s.Labels)) || len(s.Spec.Selector) == 0 || !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
				continue
			}
			for _, e := range m.Spec.Endpoints {
				for _, p := range s.Spec.Ports {
					tp := p.TargetPort
					if tp.Type == intstr.Int && tp.IntVal == 0 {
						tp = intstr.FromInt32(p.Port)
					}
					if p.Name != e.Port {
						continue
					}
					for _, cp := range c.Ports {
						if cp.ContainerPort == mp && ((tp.Type == intstr.String && tp.StrVal == cp.Name) || (tp.Type == intstr.Int && tp.IntVal == mp)) {
							return true
						}
					}
				}
			}
		}
	}
	return false
}

func (ix *index) deployment(name string) *appsv1.Deployment {
	for _, d := range ix.deployments {
		if d.Name == name {
			return d
		}
	}
	return nil
}

// selected returns the Deployments whose pods ls selects.
func (ix *index) selected(ls *metav1.LabelSelector, where string, errs *[]error) []*appsv1.Deployment {
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("%s: %w", where, err))
		return nil
	}
	if sel.Empty() {
		*errs = append(*errs, fmt.Errorf("%s: empty selector selects every pod of the namespace", where))
		return nil
	}
	var out []*appsv1.Deployment
	for _, d := range ix.deployments {
		if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			out = append(out, d)
		}
	}
	return out
}

// containerEnv resolves a container's environment: literal values, ConfigMaps and Secrets the
// chart renders, and placeholders for keys of external Secrets.
func (ix *index) containerEnv(c corev1.Container, opt CheckOptions) (map[string]string, error) {
	env := map[string]string{}
	var errs []error
	secretValue := func(name, key, envName string) (string, bool) {
		if s, ok := ix.secrets[name]; ok {
			if v, ok := s.StringData[key]; ok {
				return v, true
			}
			if v, ok := s.Data[key]; ok {
				return string(v), true
			}
			errs = append(errs, fmt.Errorf("Secret %s has no key %s", name, key))
			return "", false
		}
		if slices.Contains(opt.ExternalSecrets[name], key) {
			if v, ok := placeholders[envName]; ok {
				return v, true
			}
			return "external", true
		}
		errs = append(errs, fmt.Errorf("Secret %s (key %s) is neither rendered nor declared external", name, key))
		return "", false
	}
	for _, ef := range c.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil:
			cm, ok := ix.configMaps[ef.ConfigMapRef.Name]
			if !ok {
				errs = append(errs, fmt.Errorf("envFrom ConfigMap %s is not rendered", ef.ConfigMapRef.Name))
				continue
			}
			for k, v := range cm.Data {
				env[ef.Prefix+k] = v
			}
		case ef.SecretRef != nil:
			s, ok := ix.secrets[ef.SecretRef.Name]
			if !ok {
				errs = append(errs, fmt.Errorf("envFrom Secret %s is not rendered", ef.SecretRef.Name))
				continue
			}
			for k, v := range s.StringData {
				env[ef.Prefix+k] = v
			}
			for k, v := range s.Data {
				env[ef.Prefix+k] = string(v)
			}
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			if v, ok := secretValue(e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key, e.Name); ok {
				env[e.Name] = v
			}
		case e.ValueFrom.ConfigMapKeyRef != nil:
			r := e.ValueFrom.ConfigMapKeyRef
			if cm, ok := ix.configMaps[r.Name]; !ok {
				errs = append(errs, fmt.Errorf("env %s: ConfigMap %s is not rendered", e.Name, r.Name))
			} else if v, ok := cm.Data[r.Key]; !ok {
				errs = append(errs, fmt.Errorf("env %s: ConfigMap %s has no key %s", e.Name, r.Name, r.Key))
			} else {
				env[e.Name] = v
			}
		default:
			env[e.Name] = ""
		}
	}
	return env, errors.Join(errs...)
}

func minReplicas(d *appsv1.Deployment, autoscaled map[string][2]int32) int32 {
	if r, ok := autoscaled[d.Name]; ok {
		return r[0]
	}
	if d.Spec.Replicas == nil {
		return 1
	}
	return *d.Spec.Replicas
}

func containerHasPort(c corev1.Container, p intstr.IntOrString) bool {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return true
		}
	}
	return false
}

func podHasPort(pod corev1.PodSpec, p intstr.IntOrString) bool {
	return slices.ContainsFunc(pod.Containers, func(c corev1.Container) bool { return containerHasPort(c, p) })
}

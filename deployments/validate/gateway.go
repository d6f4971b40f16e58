package validate

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The gateway's settings the deployments must get right.
const (
	gatewayAddrVar     = "BULKACTION_GATEWAY_ADDR"
	gatewayKeysFileVar = "BULKACTION_GATEWAY_KEYS_FILE"
	gatewaySpoolDirVar = "BULKACTION_GATEWAY_SPOOL_DIR"
	// defaultGatewayAddr is GATEWAY_ADDR's default in internal/config.
	defaultGatewayAddr = ":8090"
)

var (
	keyHashRE = regexp.MustCompile(`^sha256:[0-9a-fA-F]{64}$`)
	tenantRE  = regexp.MustCompile(`^(\*|[A-Za-z0-9_-]{1,64})$`)
)

// CheckKeysFile checks the text of a gateway keys file the way the gateway reads it
// (services/gateway.ParseKeys): lines "<sha256:hex> <tenant or *> [name]", blank lines and #
// comments ignored, no key twice. A line holding a key itself instead of its hash is an error.
func CheckKeysFile(text string) error {
	var errs []error
	seen := map[string]int{}
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 || len(f) > 3 {
			errs = append(errs, fmt.Errorf("keys file line %d: want \"<sha256:hex> <tenant or *> [name]\", got %d fields", n, len(f)))
			continue
		}
		if !keyHashRE.MatchString(f[0]) {
			errs = append(errs, fmt.Errorf("keys file line %d: %.12q… is not sha256: and 64 hex digits (store the hash `bulkaction gateway key` prints, never the key)", n, f[0]))
			continue
		}
		if !tenantRE.MatchString(f[1]) {
			errs = append(errs, fmt.Errorf("keys file line %d: tenant %q is not a tenant id or *", n, f[1]))
		}
		h := strings.ToLower(f[0])
		if prev, dup := seen[h]; dup {
			errs = append(errs, fmt.Errorf("keys file line %d: the key of line %d again", n, prev))
		}
		seen[h] = n
	}
	return errors.Join(errs...)
}

// addrPort returns the port of a listen address (":8090", "0.0.0.0:8090").
func addrPort(addr string) (int32, error) {
	i := strings.LastIndex(addr, ":")
	if i < 0 {
		return 0, fmt.Errorf("%q has no port", addr)
	}
	n, err := strconv.Atoi(addr[i+1:])
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("%q: bad port", addr)
	}
	return int32(n), nil
}

// under reports whether file is inside dir (both absolute, cleaned), and its path relative to dir.
func under(file, dir string) (string, bool) {
	file, dir = path.Clean(file), path.Clean(dir)
	rel, ok := strings.CutPrefix(file, strings.TrimSuffix(dir, "/")+"/")
	return rel, ok && rel != ""
}

// isGateway reports whether a container runs the gateway target.
func isGateway(c corev1.Container) bool {
	cmd := append(slices.Clone(c.Command), c.Args...)
	return len(cmd) > 0 && cmd[0] == "gateway"
}

// checkGateway checks a gateway container of Deployment d with its resolved settings env: the API
// port is a container port other than the metrics port; the keys file lies in a Secret volume
// mounted as a directory (a subPath mount is never updated, so key changes would not reach the
// gateway); the Secret has the file's key, and a rendered one holds a valid keys file; the spool
// directory is writable under a read-only root file system; a Service sends the API port to
// ready pods only; and NetworkPolicies that select the pods let the API port in.
func (ix *index) checkGateway(d *appsv1.Deployment, c corev1.Container, env map[string]string, opt CheckOptions) error {
	where := "Deployment " + d.Name + " container " + c.Name + " (gateway)"
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(where+": "+format, args...)) }
	pod := d.Spec.Template.Spec

	// The API port.
	addr := env[gatewayAddrVar]
	if addr == "" {
		addr = defaultGatewayAddr
	}
	apiPort, err := addrPort(addr)
	if err != nil {
		fail("%s: %v", gatewayAddrVar, err)
	} else if !containerHasPort(c, intstr.FromInt32(apiPort)) {
		fail("%s %s is not a container port", gatewayAddrVar, addr)
	}
	if m := env["BULKACTION_HTTP_ADDR"]; m != "" {
		if mp, err := addrPort(m); err == nil && mp == apiPort {
			fail("%s %s and BULKACTION_HTTP_ADDR %s are the same port: the API and /metrics need their own", gatewayAddrVar, addr, m)
		}
	}

	// The keys file: in a Secret volume, mounted as a directory.
	kf := env[gatewayKeysFileVar]
	if kf == "" {
		fail("%s is not set: the gateway does not start without its API keys", gatewayKeysFileVar)
	} else {
		errs = append(errs, ix.checkKeysMount(where, pod, c, kf, opt)...)
	}

	// The spool directory must be writable.
	spool := env[gatewaySpoolDirVar]
	if spool == "" {
		spool = "/tmp" // os.TempDir() in the image
	}
	readOnlyRoot := c.SecurityContext != nil && c.SecurityContext.ReadOnlyRootFilesystem != nil && *c.SecurityContext.ReadOnlyRootFilesystem
	if readOnlyRoot {
		writable := false
		for _, vm := range c.VolumeMounts {
			if _, ok := under(spool+"/x", vm.MountPath); ok && !vm.ReadOnly && vm.SubPath == "" {
				writable = true
			}
		}
		if !writable {
			fail("%s %s is not on a writable volume, and the root file system is read-only: large uploads would fail", gatewaySpoolDirVar, spool)
		}
	}

	if apiPort == 0 {
		return errors.Join(errs...)
	}
	podLabels := labels.Set(d.Spec.Template.Labels)
	apiPortNamed := func(p intstr.IntOrString) bool {
		for _, cp := range c.Ports {
			if cp.ContainerPort == apiPort && ((p.Type == intstr.String && p.StrVal == cp.Name) || (p.Type == intstr.Int && p.IntVal == cp.ContainerPort)) {
				return true
			}
		}
		return false
	}

	// A Service for the API, to ready pods only.
	exposed := false
	for _, s := range ix.services {
		if len(s.Spec.Selector) == 0 || !labels.SelectorFromSet(s.Spec.Selector).Matches(podLabels) || s.Spec.PublishNotReadyAddresses {
			continue
		}
		for _, p := range s.Spec.Ports {
			tp := p.TargetPort
			if tp.Type == intstr.Int && tp.IntVal == 0 {
				tp = intstr.FromInt32(p.Port)
			}
			if apiPortNamed(tp) {
				exposed = true
			}
		}
	}
	if !exposed {
		fail("no Service sends the API port %d to the gateway's ready pods (publishNotReadyAddresses false)", apiPort)
	}

	// NetworkPolicies must let the API port in.
	selected, open := false, false
	for _, np := range ix.policies {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || !sel.Matches(podLabels) || !hasPolicyType(np, networkingv1.PolicyTypeIngress) {
			continue
		}
		selected = true
		for _, r := range np.Spec.Ingress {
			if len(r.Ports) == 0 {
				open = true
			}
			for _, p := range r.Ports {
				if p.Port == nil || apiPortNamed(*p.Port) {
					open = true
				}
			}
		}
	}
	if selected && !open {
		fail("the NetworkPolicies that select its pods let nothing in to the API port %d", apiPort)
	}
	return errors.Join(errs...)
}

// checkKeysMount checks that the keys file kf of container c lies in a Secret volume mounted as a
// directory, that the Secret has the file's key, and that a rendered Secret holds a valid keys file.
func (ix *index) checkKeysMount(where string, pod corev1.PodSpec, c corev1.Container, kf string, opt CheckOptions) []error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(where+": "+format, args...)) }
	var vm *corev1.VolumeMount
	var rel string
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		if m.SubPath != "" || m.SubPathExpr != "" {
			if path.Clean(m.MountPath) == path.Clean(kf) {
				fail("%s %s is mounted with subPath: the kubelet never updates such a mount, so key changes would not reach the gateway; mount the Secret as a directory", gatewayKeysFileVar, kf)
				return errs
			}
			continue
		}
		if r, ok := under(kf, m.MountPath); ok {
			vm, rel = m, r
		}
	}
	if vm == nil {
		fail("%s %s is not inside any volume mount of the container", gatewayKeysFileVar, kf)
		return errs
	}
	var vol *corev1.Volume
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == vm.Name {
			vol = &pod.Volumes[i]
		}
	}
	if vol == nil {
		fail("volume mount %s has no volume", vm.Name)
		return errs
	}
	if vol.Secret == nil {
		fail("%s %s is on volume %s, which is not a Secret (API keys are credentials)", gatewayKeysFileVar, kf, vol.Name)
		return errs
	}
	if !vm.ReadOnly {
		fail("the keys Secret is mounted read-write")
	}
	key := rel
	if len(vol.Secret.Items) > 0 {
		key = ""
		for _, it := range vol.Secret.Items {
			if path.Clean(it.Path) == rel {
				key = it.Key
			}
		}
		if key == "" {
			fail("%s %s: %s is not among the items of the Secret volume %s", gatewayKeysFileVar, kf, rel, vol.Name)
			return errs
		}
	}
	name := vol.Secret.SecretName
	if s, ok := ix.secrets[name]; ok {
		text, ok := s.StringData[key]
		if !ok {
			b, has := s.Data[key]
			if !has {
				fail("Secret %s has no key %s (the keys file)", name, key)
				return errs
			}
			text = string(b)
		}
		if err := CheckKeysFile(text); err != nil {
			fail("Secret %s: %v", name, err)
		}
	} else if !slices.Contains(opt.ExternalSecrets[name], key) {
		fail("keys Secret %s (key %s) is neither rendered nor declared external", name, key)
	}
	return errs
}

// checkIngresses checks every Ingress: its backends are rendered Services and ports, whose
// pods serve them, and never the metrics port (BULKACTION_HTTP_ADDR); TLS names a Secret and
// covers only hosts of its rules.
func (ix *index) checkIngresses(envs map[string]map[string]string) error {
	var errs []error
	for _, ing := range ix.ingresses {
		where := "Ingress " + ing.Name
		fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(where+": "+format, args...)) }
		var backends []*networkingv1.IngressServiceBackend
		if b := ing.Spec.DefaultBackend; b != nil && b.Service != nil {
			backends = append(backends, b.Service)
		}
		hosts := map[string]bool{}
		for _, r := range ing.Spec.Rules {
			hosts[r.Host] = true
			if r.HTTP == nil || len(r.HTTP.Paths) == 0 {
				fail("rule for host %q has no paths", r.Host)
				continue
			}
			for _, p := range r.HTTP.Paths {
				if p.Backend.Service == nil {
					fail("path %s has no Service backend", p.Path)
					continue
				}
				backends = append(backends, p.Backend.Service)
			}
		}
		if len(backends) == 0 {
			fail("no backend")
		}
		for _, t := range ing.Spec.TLS {
			if t.SecretName == "" {
				fail("a TLS entry without secretName")
			}
			for _, h := range t.Hosts {
				if !hosts[h] {
					fail("TLS host %s has no rule", h)
				}
			}
		}
		for _, b := range backends {
			var svc *corev1.Service
			for _, s := range ix.services {
				if s.Name == b.Name {
					svc = s
				}
			}
			if svc == nil {
				fail("backend Service %s is not rendered", b.Name)
				continue
			}
			var sp *corev1.ServicePort
			for i, p := range svc.Spec.Ports {
				if (b.Port.Name != "" && p.Name == b.Port.Name) || (b.Port.Name == "" && p.Port == b.Port.Number) {
					sp = &svc.Spec.Ports[i]
				}
			}
			if sp == nil {
				fail("backend port %s%d is not a port of Service %s", b.Port.Name, b.Port.Number, b.Name)
				continue
			}
			tp := sp.TargetPort
			if tp.Type == intstr.Int && tp.IntVal == 0 {
				tp = intstr.FromInt32(sp.Port)
			}
			sel := labels.SelectorFromSet(svc.Spec.Selector)
			for _, d := range ix.deployments {
				if len(svc.Spec.Selector) == 0 || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
					continue
				}
				for _, c := range d.Spec.Template.Spec.Containers {
					mp, err := addrPort(envs[d.Name]["BULKACTION_HTTP_ADDR"])
					if err != nil {
						continue
					}
					for _, cp := range c.Ports {
						if cp.ContainerPort == mp && ((tp.Type == intstr.String && tp.StrVal == cp.Name) || (tp.Type == intstr.Int && tp.IntVal == cp.ContainerPort)) {
							fail("backend %s:%s reaches the metrics port %d of Deployment %s: /metrics must not be exposed", b.Name, sp.Name, mp, d.Name)
						}
					}
				}
			}
		}
	}
	return errors.Join(errs...)
}

func hasPolicyType(np *networkingv1.NetworkPolicy, t networkingv1.PolicyType) bool {
	if len(np.Spec.PolicyTypes) == 0 {
		return t == networkingv1.PolicyTypeIngress // the API server's default
	}
	return slices.Contains(np.Spec.PolicyTypes, t)
}

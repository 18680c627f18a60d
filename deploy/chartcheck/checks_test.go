package chartcheck

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// serviceMonitor and prometheusRule are the fields of prometheus-operator's
// CRDs the chart uses, decoded strictly as the k8s.io/api types are (its
// Go module would pull a second Kubernetes version into the build).
type serviceMonitor struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

type prometheusRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec prometheusRuleSpec `json:"spec"`
}

type prometheusRuleSpec struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// subset reports whether every label of sel is in labels.
func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// argValues maps each --flag=value of args to its value.
func argValues(t *testing.T, args []string, flags map[string]bool) map[string]string {
	t.Helper()
	vals := map[string]string{}
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("args %q do not start with serve", args)
	}
	for _, a := range args[1:] {
		name, val, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok {
			t.Errorf("argument %q is not --flag=value", a)
			continue
		}
		if !flags[name] {
			t.Errorf("the chart passes --%s, which `sluice serve` does not have (docs/serve-flags.md)", name)
		}
		if _, dup := vals[name]; dup {
			t.Errorf("--%s passed twice", name)
		}
		vals[name] = val
	}
	return vals
}

func checkStatefulSet(t *testing.T, v variant, r *rendered, flags map[string]bool) {
	s := r.sts
	if s == nil {
		t.Fatal("no StatefulSet")
	}
	if errs := validation.IsDNS1123Subdomain(s.Name); len(errs) > 0 {
		t.Errorf("StatefulSet name %q: %v", s.Name, errs)
	}
	pod := s.Spec.Template
	if !subset(s.Spec.Selector.MatchLabels, pod.Labels) {
		t.Errorf("selector %v does not select the pod labels %v", s.Spec.Selector.MatchLabels, pod.Labels)
	}
	if s.Spec.PodManagementPolicy != "Parallel" {
		t.Errorf("podManagementPolicy %q, want Parallel (a fresh cluster waits for its members)", s.Spec.PodManagementPolicy)
	}
	hl, ok := r.services[s.Spec.ServiceName]
	if !ok || hl.Spec.ClusterIP != "None" || !hl.Spec.PublishNotReadyAddresses {
		t.Fatalf("serviceName %q is not a headless Service that publishes not-ready pods", s.Spec.ServiceName)
	}
	sc := pod.Spec.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 || sc.FSGroup == nil {
		t.Errorf("pod security context %+v: want non-root with a numeric user and fsGroup", sc)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	if !strings.HasSuffix(c.Image, ":0.1.0-dev") {
		t.Errorf("image %q is not tagged with the chart's appVersion", c.Image)
	}
	if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem ||
		c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation {
		t.Errorf("container security context %+v", c.SecurityContext)
	}
	ports := checkPorts(t, c)
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || !ports[p.HTTPGet.Port.String()] {
			t.Errorf("%s probe %+v does not get a port of the container", name, p)
			continue
		}
		want := map[string]string{"readiness": "/readyz"}[name]
		if want == "" {
			want = "/healthz"
		}
		if p.HTTPGet.Path != want {
			t.Errorf("%s probe path %q, want %q", name, p.HTTPGet.Path, want)
		}
	}
	vals := argValues(t, c.Args, flags)
	checkArgs(t, v, r, vals, s.Spec.ServiceName)
	checkGrace(t, pod.Spec.TerminationGracePeriodSeconds, vals)
	if v.cluster {
		pre := c.Lifecycle
		if pre == nil || pre.PreStop == nil || pre.PreStop.Exec == nil ||
			!slices.Contains(pre.PreStop.Exec.Command, "drain") || !slices.Contains(pre.PreStop.Exec.Command, "--self") {
			t.Errorf("no preStop hook that drains the node: %+v", pre)
		}
		checkSecretEnv(t, v, r, c)
	} else if c.Lifecycle != nil {
		t.Errorf("a single node has a preStop hook (cluster drain answers 'not a cluster node'): %+v", c.Lifecycle)
	}
	checkVolumes(t, v, r, pod.Spec.Volumes, c.VolumeMounts)
}

// checkPorts checks the container's port names and returns them.
func checkPorts(t *testing.T, c corev1.Container) map[string]bool {
	names := map[string]bool{}
	for _, p := range c.Ports {
		if errs := validation.IsValidPortName(p.Name); len(errs) > 0 {
			t.Errorf("port name %q: %v", p.Name, errs)
		}
		if names[p.Name] {
			t.Errorf("port name %q twice", p.Name)
		}
		if p.ContainerPort < 1 || p.ContainerPort > 65535 {
			t.Errorf("port %s = %d", p.Name, p.ContainerPort)
		}
		names[p.Name] = true
	}
	return names
}

func checkArgs(t *testing.T, v variant, r *rendered, vals map[string]string, headless string) {
	if vals["node-name"] != "$(POD_NAME)" {
		t.Errorf("--node-name=%q, want the pod name", vals["node-name"])
	}
	if vals["config"] == "" {
		t.Error("no --config")
	}
	_, hasJoin := vals["join"]
	if hasJoin != v.cluster || (v.cluster && vals["cluster-listen"] == "") {
		t.Errorf("cluster %v: --join %q, --cluster-listen %q", v.cluster, vals["join"], vals["cluster-listen"])
	}
	if v.cluster {
		want := headless + "." + namespace + ".svc.cluster.local:7946"
		if vals["join"] != want {
			t.Errorf("--join=%q, want %q (the headless Service's name)", vals["join"], want)
		}
		if !strings.HasPrefix(vals["cluster-advertise"], "$(POD_IP):") {
			t.Errorf("--cluster-advertise=%q, want the pod IP", vals["cluster-advertise"])
		}
	}
	_, tls := vals["tls-listen"]
	if tls != v.tls || (v.tls && (vals["tls-cert"] == "" || vals["tls-key"] == "")) {
		t.Errorf("tls %v: --tls-listen %q --tls-cert %q", v.tls, vals["tls-listen"], vals["tls-cert"])
	}
	if _, ok := vals["data-dir"]; ok != (v.raft && v.cluster) || (ok && vals["data-dir"] != "/data") {
		t.Errorf("raft %v cluster %v: --data-dir %q", v.raft, v.cluster, vals["data-dir"])
	}
	if v.raft && v.cluster && vals["bootstrap-expect"] != strconv.Itoa(int(*r.sts.Spec.Replicas)) {
		t.Errorf("--bootstrap-expect=%q with %d replicas", vals["bootstrap-expect"], *r.sts.Spec.Replicas)
	}
	if v.name == "replicated-tls" && (vals["trusted-proxies"] != "10.0.0.0/8,192.0.2.7" || vals["max-conns-per-addr"] != "100" || vals["replicas"] != "2") {
		t.Errorf("values not passed: %v", vals)
	}
}

// checkGrace: Kubernetes kills the pod after the grace period; it must be
// above the drain and the shutdown the node is told it may take.
func checkGrace(t *testing.T, grace *int64, vals map[string]string) {
	d, err1 := time.ParseDuration(vals["drain-timeout"])
	s, err2 := time.ParseDuration(vals["shutdown-timeout"])
	if err1 != nil || err2 != nil || grace == nil {
		t.Fatalf("drain %q, shutdown %q, grace %v", vals["drain-timeout"], vals["shutdown-timeout"], grace)
	}
	if time.Duration(*grace)*time.Second <= d+s {
		t.Errorf("terminationGracePeriodSeconds %d is not above drain %v + shutdown %v", *grace, d, s)
	}
}

func checkSecretEnv(t *testing.T, v variant, r *rendered, c corev1.Container) {
	for _, e := range c.Env {
		if e.Name != "SLUICE_CLUSTER_SECRET" {
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		if strings.Contains(strings.Join(v.set, ","), "existingSecret=") {
			if ref.Name != "my-secret" {
				t.Errorf("secret %q, want the existing one", ref.Name)
			}
			if len(r.secrets) > 0 {
				t.Errorf("a Secret was made although one exists: %v", slices.Collect(maps.Keys(r.secrets)))
			}
			return
		}
		sec, ok := r.secrets[ref.Name]
		if !ok || len(sec.Data[ref.Key]) < 32 {
			t.Errorf("the cluster secret %s/%s is not a rendered Secret of at least 32 bytes", ref.Name, ref.Key)
		}
		return
	}
	t.Error("no SLUICE_CLUSTER_SECRET in a cluster")
}

func checkVolumes(t *testing.T, v variant, r *rendered, vols []corev1.Volume, mounts []corev1.VolumeMount) {
	byName := map[string]corev1.Volume{}
	for _, vol := range vols {
		byName[vol.Name] = vol
	}
	claims := map[string]bool{}
	for _, pvc := range r.sts.Spec.VolumeClaimTemplates {
		claims[pvc.Name] = true
		if pvc.Spec.Resources.Requests.Storage().IsZero() {
			t.Errorf("claim %s requests no storage", pvc.Name)
		}
	}
	if claims["data"] != v.persistence {
		t.Errorf("persistence %v, claim templates %v", v.persistence, claims)
	}
	for _, m := range mounts {
		vol, ok := byName[m.Name]
		if !ok && !claims[m.Name] {
			t.Errorf("mount %s has no volume", m.Name)
		}
		if cm := vol.ConfigMap; cm != nil {
			if _, ok := r.configMap[cm.Name].Data[m.SubPath]; !ok {
				t.Errorf("mount %s: ConfigMap %s has no key %q", m.Name, cm.Name, m.SubPath)
			}
		}
		if m.MountPath == "/data" && (claims[m.Name] == (vol.EmptyDir != nil)) {
			t.Errorf("/data is neither only a claim nor only an emptyDir")
		}
	}
	if tlsVol, ok := byName["tls"]; ok != v.tls || (ok && (tlsVol.Secret == nil || tlsVol.Secret.SecretName != "sluice-tls")) {
		t.Errorf("tls %v: volume %+v", v.tls, tlsVol)
	}
}

func checkServices(t *testing.T, v variant, r *rendered) {
	podLabels := r.sts.Spec.Template.Labels
	ports := checkPorts(t, r.sts.Spec.Template.Spec.Containers[0])
	for name, s := range r.services {
		if errs := validation.IsDNS1035Label(name); len(errs) > 0 {
			t.Errorf("Service name %q: %v", name, errs)
		}
		if !subset(s.Spec.Selector, podLabels) {
			t.Errorf("Service %s selects %v, not the pods (%v)", name, s.Spec.Selector, podLabels)
		}
		for _, p := range s.Spec.Ports {
			if !ports[p.TargetPort.String()] {
				t.Errorf("Service %s port %s targets %q, not a port of the pod", name, p.Name, p.TargetPort.String())
			}
		}
	}
	client, ok := r.services[fullname()]
	if !ok {
		t.Fatalf("no client Service %s", fullname())
	}
	want := []string{"client", "websocket"}
	if v.tls {
		want = append(want, "tls")
	}
	var got []string
	for _, p := range client.Spec.Ports {
		got = append(got, p.Name)
	}
	if !slices.Equal(got, want) {
		t.Errorf("client Service ports %v, want %v", got, want)
	}
	hl := r.services[r.sts.Spec.ServiceName]
	gossip := 0
	for _, p := range hl.Spec.Ports {
		if strings.HasPrefix(p.Name, "gossip") {
			gossip++
		}
	}
	if v.cluster != (gossip == 2) {
		t.Errorf("cluster %v: headless Service has %d gossip ports (want TCP and UDP)", v.cluster, gossip)
	}
}

func checkExtras(t *testing.T, v variant, r *rendered) {
	if (r.pdb != nil) != v.cluster {
		t.Errorf("cluster %v, PodDisruptionBudget %v", v.cluster, r.pdb != nil)
	}
	if p := r.pdb; p != nil {
		if p.Spec.MaxUnavailable == nil || p.Spec.MaxUnavailable.IntValue() != 1 || p.Spec.MinAvailable != nil ||
			!subset(p.Spec.Selector.MatchLabels, r.sts.Spec.Template.Labels) {
			t.Errorf("PodDisruptionBudget %+v: want one unavailable pod of the StatefulSet", p.Spec)
		}
	}
	if m := r.monitor; m != nil {
		var selected []string
		for name, s := range r.services {
			if subset(m.Spec.Selector.MatchLabels, s.Labels) {
				selected = append(selected, name)
			}
		}
		if len(selected) != 1 || selected[0] != r.sts.Spec.ServiceName {
			t.Errorf("the ServiceMonitor selects %v, want the headless Service only", selected)
		}
		if len(m.Spec.Endpoints) != 1 || m.Spec.Endpoints[0].Port != "http" || m.Spec.Endpoints[0].Path != "/metrics" {
			t.Errorf("ServiceMonitor endpoints %+v", m.Spec.Endpoints)
		}
	}
	if rule := r.rule; rule != nil && len(rule.Spec.Groups) == 0 {
		t.Error("PrometheusRule without groups")
	}
	if v.name == "replicated-tls" && (r.monitor == nil || r.rule == nil) {
		t.Error("serviceMonitor / prometheusRule enabled but not rendered")
	}
	if r.configMap[fullname()] == nil {
		t.Error("no ConfigMap")
	}
}

package chartcheck

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Paths from this package.
var (
	chartDir   = filepath.Join("..", "helm", "sluice")
	flagsDoc   = filepath.Join("..", "..", "docs", "serve-flags.md")
	opsGuide   = filepath.Join("..", "..", "docs", "operations.md")
	kubeTarget = "1.31.0" // the Kubernetes version the chart is rendered for
)

const (
	release   = "sl"
	namespace = "messaging"
)

// variant is one set of values the chart is rendered with.
type variant struct {
	name string
	set  []string // helm --set
	// cluster: more than one node; tls: TLS on.
	cluster, tls, persistence, raft bool
}

var variants = []variant{
	{name: "default", cluster: true, persistence: true, raft: true},
	{name: "single-node", set: []string{"replicaCount=1"}, persistence: true, raft: true},
	{name: "replicated-tls", cluster: true, tls: true, persistence: true, raft: true, set: []string{
		"replicaCount=5", "streamletReplicas=2", "tls.enabled=true", "tls.secretName=sluice-tls",
		"serviceMonitor.enabled=true", "prometheusRule.enabled=true", "trustedProxies[0]=10.0.0.0/8",
		"trustedProxies[1]=192.0.2.7", "maxConnsPerAddr=100", "service.type=LoadBalancer",
		"persistence.storageClassName=fast", "clusterSecret.existingSecret=my-secret",
		"terminationGracePeriodSeconds=60", "podAnnotations.team=rt",
	}},
	{name: "ephemeral-without-raft", cluster: true, set: []string{"raft.enabled=false", "persistence.enabled=false"}},
}

// helmBin is the helm to run: $HELM, else helm on $PATH.
func helmBin(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	h, err := exec.LookPath("helm")
	if err != nil {
		t.Fatal("helm not found: install the pinned one with deploy/helm/check.sh (or set $HELM)")
	}
	return h
}

// render runs helm template for v and returns its documents.
func render(t *testing.T, v variant) [][]byte {
	t.Helper()
	args := []string{"template", release, chartDir, "--namespace", namespace, "--kube-version", kubeTarget}
	for _, s := range v.set {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(helmBin(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(out.String(), -1) {
		if strings.TrimSpace(stripComments(d)) != "" {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// rendered is the decoded output of one variant.
type rendered struct {
	sts       *appsv1.StatefulSet
	services  map[string]*corev1.Service
	configMap map[string]*corev1.ConfigMap
	secrets   map[string]*corev1.Secret
	pdb       *policyv1.PodDisruptionBudget
	monitor   *serviceMonitor
	rule      *prometheusRule
}

// decode strictly decodes every document into its API type: a field the
// type does not have, or a value of the wrong type, fails the test.
func decode(t *testing.T, docs [][]byte) *rendered {
	t.Helper()
	r := &rendered{services: map[string]*corev1.Service{}, configMap: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	for _, d := range docs {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(d, &tm); err != nil {
			t.Fatalf("not YAML: %v\n%s", err, d)
		}
		var obj any
		var want string
		switch tm.Kind {
		case "StatefulSet":
			r.sts, want = &appsv1.StatefulSet{}, "apps/v1"
			obj = r.sts
		case "Service":
			obj, want = &corev1.Service{}, "v1"
		case "ConfigMap":
			obj, want = &corev1.ConfigMap{}, "v1"
		case "Secret":
			obj, want = &corev1.Secret{}, "v1"
		case "PodDisruptionBudget":
			r.pdb, want = &policyv1.PodDisruptionBudget{}, "policy/v1"
			obj = r.pdb
		case "ServiceMonitor":
			r.monitor, want = &serviceMonitor{}, "monitoring.coreos.com/v1"
			obj = r.monitor
		case "PrometheusRule":
			r.rule, want = &prometheusRule{}, "monitoring.coreos.com/v1"
			obj = r.rule
		default:
			t.Fatalf("unexpected kind %q (add it to the test):\n%s", tm.Kind, d)
		}
		if tm.APIVersion != want {
			t.Errorf("%s has apiVersion %q, want %q", tm.Kind, tm.APIVersion, want)
		}
		if err := strictDecode(d, obj); err != nil {
			t.Fatalf("%s does not decode strictly into its API type: %v\n%s", tm.Kind, err, d)
		}
		switch o := obj.(type) {
		case *corev1.Service:
			r.services[o.Name] = o
		case *corev1.ConfigMap:
			r.configMap[o.Name] = o
		case *corev1.Secret:
			r.secrets[o.Name] = o
		}
	}
	return r
}

// strictDecode decodes a YAML document into obj as the API server's
// strict field validation does: duplicate keys, unknown fields and field
// names in the wrong case (encoding/json would accept
// readOnlyRootFileSystem for readOnlyRootFilesystem) are errors.
func strictDecode(doc []byte, obj any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := sigsjson.UnmarshalStrict(j, obj, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// serveFlags returns the flags of docs/serve-flags.md (generated from
// `sluice serve`).
func serveFlags(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(flagsDoc)
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)").FindAllSubmatch(b, -1) {
		flags[string(m[1])] = true
	}
	if len(flags) < 20 {
		t.Fatalf("only %d flags found in %s", len(flags), flagsDoc)
	}
	return flags
}

func TestChartRendersValidObjects(t *testing.T) {
	flags := serveFlags(t)
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			r := decode(t, render(t, v))
			checkStatefulSet(t, v, r, flags)
			checkServices(t, v, r)
			checkExtras(t, v, r)
		})
	}
}

func fullname() string { return release + "-sluice" }

func TestChartRefusesAShortGracePeriod(t *testing.T) {
	args := []string{"template", release, chartDir, "--kube-version", kubeTarget, "--set", "terminationGracePeriodSeconds=25"}
	out, err := exec.Command(helmBin(t), args...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "must be above drainTimeoutSeconds + shutdownTimeoutSeconds") {
		t.Fatalf("a grace period below drain + shutdown rendered: %v\n%s", err, out)
	}
	args = []string{"template", release, chartDir, "--kube-version", kubeTarget, "--set", "clusterSecret.value=short"}
	if out, err := exec.Command(helmBin(t), args...).CombinedOutput(); err == nil || !strings.Contains(string(out), "at least 32 bytes") {
		t.Fatalf("a short cluster secret rendered: %v\n%s", err, out)
	}
}

// TestAlertsInGuideAreTheChartsRules: the example Prometheus rules of
// docs/operations.md are the chart's files/alerts.yaml, byte for byte.
func TestAlertsInGuideAreTheChartsRules(t *testing.T) {
	rules, err := os.ReadFile(filepath.Join(chartDir, "files", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	guide, err := os.ReadFile(opsGuide)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- alerts: deploy/helm/sluice/files/alerts.yaml -->\n```yaml\n(.*?)```").FindSubmatch(guide)
	if m == nil {
		t.Fatalf("%s has no alerts block", opsGuide)
	}
	if !bytes.Equal(m[1], rules) {
		t.Fatalf("the alerts block of %s differs from files/alerts.yaml: copy the file into it", opsGuide)
	}
	var pr prometheusRuleSpec
	if err := strictDecode(rules, &pr); err != nil || len(pr.Groups) == 0 {
		t.Fatalf("files/alerts.yaml: %v", err)
	}
	for _, g := range pr.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %+v lacks a name, expression, severity or summary", r)
			}
		}
	}
}

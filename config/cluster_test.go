package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/engine"
)

const testSecret = "0123456789abcdef0123456789abcdef"

func TestClusterTableTurnsClusterModeOn(t *testing.T) {
	doc := `name = "n1"
[cluster]
listen = "127.0.0.1:7946"
advertise = "10.0.0.1:7946"
client-advertise = "10.0.0.1:7400"
join = ["10.0.0.2:7946", "10.0.0.3:7946"]
secret = "` + testSecret + `"
capacity = 4
rpc-timeout = "3s"
report-interval = "250ms"
`
	s := Default()
	if err := Parse([]byte(doc), &s); err != nil {
		t.Fatal(err)
	}
	want := engine.ClusterOptions{Listen: "127.0.0.1:7946", Advertise: "10.0.0.1:7946", ClientAdvertise: "10.0.0.1:7400",
		Join: []string{"10.0.0.2:7946", "10.0.0.3:7946"}, Secret: testSecret, Capacity: 4,
		RPCTimeout: 3 * time.Second, ReportInterval: 250 * time.Millisecond, DataDir: "sluice-data/n1"}
	if !s.ClusterOn() || !s.NameSet || s.Options.Cluster != nil {
		t.Fatalf("ClusterOn %v NameSet %v Options.Cluster %+v", s.ClusterOn(), s.NameSet, s.Options.Cluster)
	}
	o := s.EngineOptions()
	if o.Cluster == nil || !reflect.DeepEqual(*o.Cluster, want) || o.ServerName != "n1" {
		t.Fatalf("engine options cluster %+v name %q, want %+v", o.Cluster, o.ServerName, want)
	}
	// The engine options own their copy of the seeds.
	o.Cluster.Join[0] = "changed:1"
	if s.Cluster.Join[0] != "10.0.0.2:7946" {
		t.Fatal("EngineOptions shares Join with the configuration")
	}
}

func TestClusterSecretAloneKeepsSingleNode(t *testing.T) {
	s := Default()
	if err := Parse([]byte("[cluster]\nsecret = \""+testSecret+"\"\n"), &s); err != nil {
		t.Fatal(err)
	}
	if s.ClusterOn() || s.EngineOptions().Cluster != nil || s.Cluster.Secret != testSecret || s.NameSet {
		t.Fatalf("secret-only table: %+v", s)
	}
}

func TestClusterErrorsNameKeyAndProblem(t *testing.T) {
	auth := "[[auth.roles]]\nname = \"r\"\n[[auth.tokens]]\nhash = \"" + engine.HashToken([]byte("x")) + "\"\nrole = \"r\"\n"
	for _, tc := range []struct {
		doc  string
		want []string
	}{
		{"[cluster]\njoin = [\"127.0.0.1:1\"]", []string{"cluster.join", "cluster.listen"}},
		{"[cluster]\nclient-advertise = \"127.0.0.1:1\"", []string{"cluster.client-advertise", "--cluster-listen"}},
		{"[cluster]\ncapacity = 2", []string{"cluster.capacity", "cluster.listen"}},
		{"[cluster]\nlisten = \"nowhere\"", []string{"cluster.listen", "HOST:PORT"}},
		{"[cluster]\nlisten = \"localhost:7946\"", []string{"cluster.listen", "not an IP address"}},
		{"[cluster]\nlisten = \":7946\"\nadvertise = \"gossip.example:7946\"", []string{"cluster.advertise", "not an IP address"}},
		{"[cluster]\nlisten = \":7946\"\nadvertise = \"10.0.0.1:0\"", []string{"cluster.advertise", "port other than 0"}},
		{"[cluster]\nlisten = \":7946\"\nadvertise = \"10.0.0.1\"", []string{"cluster.advertise", "IP:PORT"}},
		{"[cluster]\nlisten = \"127.0.0.1:0\"\njoin = [\"127.0.0.1:1\", \"x\"]", []string{"cluster.join[1]", "HOST:PORT"}},
		{"[cluster]\nlisten = \"127.0.0.1:0\"\nclient-advertise = \"x\"", []string{"cluster.client-advertise"}},
		{"[cluster]\nlisten = \"127.0.0.1:0\"\ncapacity = -1", []string{"cluster.capacity", "negative"}},
		{"[cluster]\nlisten = \"127.0.0.1:0\"\nrpc-timeout = \"-1s\"", []string{"cluster", "negative duration"}},
		{"[cluster]\nlisten = \"127.0.0.1:0\"\nrpc-timeout = 2", []string{"rpc-timeout", "invalid duration"}},
		{"name = \"\"\n[cluster]\nlisten = \"127.0.0.1:0\"", []string{"name", "unique name"}},
		{"[cluster]\nlisten = \"127.0.0.1:0\"\n" + auth, []string{"cluster.secret", "authentication"}},
		{"[cluster]\nlisten = \"127.0.0.1:0\"\nsecret = \"short\"", []string{"cluster.secret", "at least 32"}},
		{"[cluster]\nlisten = \"127.0.0.1:0\"\nseeds = []", []string{"unknown key", "cluster.seeds"}},
		{"[cluster]\nlisten = \"127.0.0.1:0\"\njoin = \"127.0.0.1:1\"", []string{"join"}},
	} {
		s := Default()
		err := Parse([]byte(tc.doc), &s)
		if err == nil || !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: err = %v, want an ErrInvalid", tc.doc, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q does not mention %q", tc.doc, err, w)
			}
		}
		if !reflect.DeepEqual(s, Default()) {
			t.Errorf("%q: a failed Parse changed dst", tc.doc)
		}
	}
}

func TestClusterSecretNeverInErrors(t *testing.T) {
	secret := "s3cr3t-but-too-short"
	s := Default()
	err := Parse([]byte("[cluster]\nlisten = \"127.0.0.1:0\"\nsecret = \""+secret+"\""), &s)
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("err = %v; want an error that does not contain the secret", err)
	}
}

func TestLoadCluster(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.toml")
	write := func(doc string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Only [cluster] is checked: the rest may need flags to be complete.
	write("tls-listen = \"127.0.0.1:0\"\n[cluster]\nlisten = \"127.0.0.1:7946\"\nsecret = \"" + testSecret + "\"\n")
	c, err := LoadCluster(path)
	if err != nil || c.Secret != testSecret || c.Listen != "127.0.0.1:7946" {
		t.Fatalf("LoadCluster = %+v, %v", c, err)
	}
	write("ttl = \"5s\"\n")
	if c, err := LoadCluster(path); err != nil || !reflect.DeepEqual(c, engine.ClusterOptions{}) {
		t.Fatalf("file without [cluster]: %+v, %v", c, err)
	}
	write("[cluster]\nsecret = \"short\"\n")
	if _, err := LoadCluster(path); err == nil || !strings.Contains(err.Error(), "cluster.secret") || !strings.Contains(err.Error(), path) {
		t.Fatalf("short secret: %v", err)
	}
	write("[cluster]\nsekret = \"x\"\n")
	if _, err := LoadCluster(path); err == nil || !strings.Contains(err.Error(), "cluster.sekret") {
		t.Fatalf("unknown key: %v", err)
	}
	if _, err := LoadCluster(filepath.Join(dir, "missing.toml")); err == nil {
		t.Fatal("missing file accepted")
	}
}

func TestKeyForCluster(t *testing.T) {
	for field, key := range map[string]string{
		"Cluster.Listen":          "cluster.listen",
		"Cluster.Join[2]":         "cluster.join[2]",
		"Cluster.ClientAdvertise": "cluster.client-advertise",
		"Cluster.RPCTimeout":      "cluster.rpc-timeout",
		"Cluster.Secret":          "cluster.secret",
	} {
		if got := KeyFor(field); got != key {
			t.Errorf("KeyFor(%q) = %q, want %q", field, got, key)
		}
	}
}

// TestExampleClusterSection: the commented [cluster] section of the
// example file, uncommented, is a valid cluster configuration.
func TestExampleClusterSection(t *testing.T) {
	b, err := os.ReadFile("../sluice.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	doc, section, found := strings.Cut(string(b), "\n# [cluster]\n")
	if !found {
		t.Fatal("no commented [cluster] section in the example file")
	}
	var un strings.Builder
	un.WriteString(doc + "\n[cluster]\n")
	for line := range strings.SplitSeq(section, "\n") {
		un.WriteString(strings.TrimPrefix(line, "# ") + "\n")
	}
	s := Default()
	if err := Parse([]byte(un.String()), &s); err != nil {
		t.Fatalf("uncommented [cluster] section: %v", err)
	}
	o := s.EngineOptions()
	if o.Cluster == nil || o.Cluster.Listen != "10.0.0.1:7946" || len(o.Cluster.Join) != 2 || o.Cluster.RPCTimeout != 2*time.Second || !s.NameSet {
		t.Fatalf("cluster options %+v", o.Cluster)
	}
}

// TestClusterJoinTakesDNSNames: seeds may be IP:PORT, HOST:PORT (A and
// AAAA records) or dnssrv+NAME (SRV records), resolved by membership.
func TestClusterJoinTakesDNSNames(t *testing.T) {
	doc := "[cluster]\nlisten = \"127.0.0.1:0\"\njoin = [\"10.0.0.1:7946\", \"sluice-headless.ns.svc.cluster.local:7946\", \"dnssrv+_gossip._tcp.sluice-headless.ns.svc.cluster.local\"]"
	s := Default()
	if err := Parse([]byte(doc), &s); err != nil || len(s.Cluster.Join) != 3 {
		t.Fatalf("join = %v, %v", s.Cluster.Join, err)
	}
	s = Default()
	if err := Parse([]byte("[cluster]\nlisten = \"127.0.0.1:0\"\njoin = [\"dnssrv+name:7946\"]"), &s); err == nil || !strings.Contains(err.Error(), "cluster.join[0]") {
		t.Fatalf("dnssrv+ with a port: %v", err)
	}
}

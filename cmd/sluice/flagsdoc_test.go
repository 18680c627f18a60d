package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-rtm/sluice/config"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/serve-flags.md from the flags of 'sluice serve'")

// serveFlagsDoc is the path of the generated reference, from this package.
var serveFlagsDoc = filepath.Join("..", "..", "docs", "serve-flags.md")

// TestServeFlagsReference: docs/serve-flags.md is exactly what the flags
// of 'sluice serve' say (one source of truth). After changing a flag,
// regenerate it with
//
//	go test ./cmd/sluice -run TestServeFlagsReference -update-docs
func TestServeFlagsReference(t *testing.T) {
	want := serveFlagsMarkdown(t)
	if *updateDocs {
		if err := os.WriteFile(serveFlagsDoc, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(serveFlagsDoc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("docs/serve-flags.md does not match 'sluice serve --help': regenerate it with\n" +
			"  go test ./cmd/sluice -run TestServeFlagsReference -update-docs")
	}
}

// serveFlagsMarkdown renders the reference: every flag of serve with its
// value, default, configuration-file key (found by asking the config
// package whether it knows the key) and meaning.
func serveFlagsMarkdown(t *testing.T) []byte {
	fs := newFlagSet("serve", "", "")
	cfg := fromConfig(config.Default())
	bindServeFlags(fs, &cfg)
	var b bytes.Buffer
	b.WriteString(`# sluice serve: flags

<!-- Generated from the flags of 'sluice serve' by
     go test ./cmd/sluice -run TestServeFlagsReference -update-docs
     Do not edit: CI fails when this file and the flags differ. -->

Every flag may be written ` + "`-flag`" + ` or ` + "`--flag`" + `, with its value after a space
or an ` + "`=`" + `. Sizes take K/KiB, M/MiB, G/GiB (x1024) or KB, MB, GB (x1000);
durations are Go's (` + "`500ms`, `4s`, `1m30s`" + `). The configuration file
(` + "`--config FILE`" + `, TOML, see ` + "`sluice.example.toml`" + `) takes the keys of the third column;
a flag on the command line wins over the file. ` + "`$SLUICE_CLUSTER_SECRET`" + ` sets the
cluster secret when neither ` + "`--cluster-secret`" + ` nor the file does.

| flag | default | config key | meaning |
|---|---|---|---|
`)
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		flagCol := "`--" + f.Name
		if name != "" {
			flagCol += " " + name
		}
		flagCol += "`"
		def := f.DefValue
		switch def {
		case "", "0", "false", "0s", "[]":
			def = ""
		default:
			def = "`" + def + "`"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", flagCol, def, configKeyOf(t, f.Name), strings.ReplaceAll(usage, "|", "\\|"))
	})
	return b.Bytes()
}

// configKeyOf returns the configuration-file key of flag name ("" when
// the file has none): the same name at the top level, or in the [cluster]
// table without the "cluster-" prefix, whichever the config package
// accepts.
func configKeyOf(t *testing.T, name string) string {
	known := func(doc string) bool {
		s := config.Default()
		err := config.Parse([]byte(doc), &s)
		return err == nil || !strings.Contains(err.Error(), "unknown key")
	}
	if name == "config" {
		return ""
	}
	if strings.HasPrefix(name, "cluster-") || name == "join" || name == "client-advertise" {
		key := strings.TrimPrefix(name, "cluster-")
		if known("[cluster]\n" + key + " = 0\n") {
			return "`[cluster] " + key + "`"
		}
	}
	if name == "node-name" {
		name = "name" // the same setting under its other name
	}
	if known(name + " = 0\n") {
		return "`" + name + "`"
	}
	t.Logf("flag --%s has no configuration key", name)
	return ""
}

#!/usr/bin/env bash
# Lints, renders and validates the Helm chart deploy/helm/sluice, offline
# (CI runs this; so can you):
#
#   deploy/helm/check.sh
#
# 1. installs the pinned helm from the Go module proxy when the one found
#    ($HELM, else $(go env GOPATH)/bin/helm) is not that version;
# 2. helm lint --strict and helm template, with the default values and
#    with a replicated, TLS-enabled variant;
# 3. the chartcheck tests (deploy/chartcheck, their own Go module): every
#    rendered object of four value sets strictly decoded into the
#    Kubernetes API types (k8s.io/api), and checked for what the types do
#    not say (see deploy/chartcheck/doc.go).
set -euo pipefail
cd "$(dirname "$0")/../.."
helm_version=v3.21.4
kube_version=1.31.0
gobin="$(go env GOPATH)/bin"
helm=${HELM:-$gobin/helm}
if ! "$helm" version --template '{{.Version}}' 2>/dev/null | grep -qx "$helm_version"; then
	echo "installing helm $helm_version (go install)"
	GOBIN="$gobin" go install -ldflags "-X helm.sh/helm/v3/internal/version.version=$helm_version" \
		"helm.sh/helm/v3/cmd/helm@$helm_version"
	helm=$gobin/helm
fi
"$helm" version --short

chart=deploy/helm/sluice
variant=(--set replicaCount=5 --set streamletReplicas=2 --set tls.enabled=true --set tls.secretName=sluice-tls
	--set serviceMonitor.enabled=true --set prometheusRule.enabled=true --set 'trustedProxies[0]=10.0.0.0/8')
"$helm" lint --strict --kube-version "$kube_version" "$chart"
"$helm" lint --strict --kube-version "$kube_version" "$chart" "${variant[@]}"
for v in default variant; do
	args=()
	[ "$v" = variant ] && args=("${variant[@]}")
	n=$("$helm" template sluice "$chart" --kube-version "$kube_version" "${args[@]}" | grep -c '^kind:')
	echo "helm template ($v values): $n objects"
done
(cd deploy && go mod download && go vet ./... && HELM="$helm" go test -count=1 ./...)

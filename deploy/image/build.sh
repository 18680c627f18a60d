#!/usr/bin/env bash
# Builds the Sluice server image from the working tree.
#
#   deploy/image/build.sh [TAG]      default TAG: localhost/sluice:dev
#
# The binary is compiled here, static (CGO_ENABLED=0), and copied into an
# empty (FROM scratch) image by deploy/image/Containerfile; no base image
# is pulled, so it builds without a registry. Uses podman, or buildah when
# podman is missing (Debian: apt-get install podman). Environment:
# SLUICE_VERSION (default: git describe), GOARCH (default: the host's).
set -euo pipefail
cd "$(dirname "$0")/../.."
tag=${1:-localhost/sluice:dev}
version=${SLUICE_VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
ctx=$(mktemp -d "${TMPDIR:-/tmp}/sluice-image.XXXXXX")
trap 'rm -rf "$ctx"' EXIT

CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$ctx/sluice" ./cmd/sluice
printf 'root:x:0:0:root:/:/sbin/nologin\nsluice:x:65532:65532:sluice:/data:/sbin/nologin\n' >"$ctx/passwd"
printf 'root:x:0:\nsluice:x:65532:\n' >"$ctx/group"
mkdir -p "$ctx/data"
chmod 0644 "$ctx/passwd" "$ctx/group"
chmod 0750 "$ctx/data"
cp deploy/image/Containerfile "$ctx/Containerfile"

if command -v podman >/dev/null; then
	podman build --quiet --build-arg "VERSION=$version" -t "$tag" -f "$ctx/Containerfile" "$ctx" >/dev/null
elif command -v buildah >/dev/null; then
	buildah build --quiet --build-arg "VERSION=$version" -t "$tag" -f "$ctx/Containerfile" "$ctx" >/dev/null
else
	echo "build.sh: neither podman nor buildah is installed (Debian: apt-get install podman)" >&2
	exit 1
fi
echo "built $tag (sluice $version)"

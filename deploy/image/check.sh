#!/usr/bin/env bash
# Builds the server image and checks it (CI runs this; so can you):
#
#   deploy/image/check.sh
#
# 1. its metadata: a numeric non-root user, the entrypoint, the ports;
# 2. its size (at most 32 MiB: it is one static binary);
# 3. its contents: exactly the files the Containerfile puts there, and a
#    static binary (no ELF interpreter) that runs `sluice version`;
# 4. when this machine can run containers: `sluice version` from the
#    image, a server started from it that answers a publish and a
#    subscribe from the host, and a graceful exit (status 0) on SIGTERM.
#    When it cannot, it prints exactly what stopped the container and
#    says that only 1-3 were checked.
#
# Needs podman (Debian: apt-get install podman runc). Uses the ports
# 127.0.0.1:17400 and :17490 for step 4.
set -euo pipefail
cd "$(dirname "$0")/../.."
tag=localhost/sluice:check
name=sluice-image-check
work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-image-check.XXXXXX")
cleanup() {
	podman rm -f "$name" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
fail() {
	echo "image check FAILED: $*" >&2
	exit 1
}

deploy/image/build.sh "$tag"

echo "-- metadata"
user=$(podman image inspect "$tag" --format '{{.Config.User}}')
entry=$(podman image inspect "$tag" --format '{{json .Config.Entrypoint}}')
ports=$(podman image inspect "$tag" --format '{{range $p, $_ := .Config.ExposedPorts}}{{$p}} {{end}}')
echo "user $user; entrypoint $entry; ports $ports"
[ "$user" = "65532:65532" ] || fail "user is '$user', want 65532:65532"
[ "$entry" = '["/usr/local/bin/sluice"]' ] || fail "entrypoint $entry"
for p in 7400/tcp 7401/tcp 9090/tcp 7946/tcp 7946/udp; do
	case " $ports" in *" $p "*) ;; *) fail "port $p is not exposed" ;; esac
done

echo "-- size"
size=$(podman image inspect "$tag" --format '{{.Size}}')
echo "$size bytes ($((size / 1024 / 1024)) MiB)"
[ "$size" -le $((32 << 20)) ] || fail "image is $size bytes, more than 32 MiB"

echo "-- contents"
cid=$(podman create "$tag")
podman export "$cid" >"$work/rootfs.tar"
podman rm "$cid" >/dev/null
tar -tf "$work/rootfs.tar" | sed 's#/$##' | sort >"$work/files"
printf '%s\n' data etc etc/group etc/passwd usr usr/local usr/local/bin usr/local/bin/sluice | sort >"$work/want"
if ! diff -u "$work/want" "$work/files"; then
	fail "the image holds other files than the Containerfile's"
fi
tar -xf "$work/rootfs.tar" -C "$work" usr/local/bin/sluice etc/passwd
bin="$work/usr/local/bin/sluice"
if grep -qaE '/lib(64)?/ld-(linux|musl)' "$bin"; then
	fail "the binary names a dynamic loader (ELF interpreter): it is not static"
fi
grep -q '^sluice:x:65532:65532:' "$work/etc/passwd" || fail "/etc/passwd has no user 65532"
"$bin" version || fail "the image's binary does not run on this machine"

echo "-- running it"
# crun 1.8 (Debian 12) refuses this kind of machine's cgroups (v1 with a
# v2 hierarchy mounted: "cgroups in hybrid mode not supported"), and
# podman's default RLIMIT_NOFILE (1048576) is above what a process without
# CAP_SYS_RESOURCE may set; runc with limits below the machine's works.
run_flags=()
if ! out=$(podman run --rm "$tag" version 2>&1); then
	echo "podman run with its defaults cannot start a container here: $out"
	run_flags=(--runtime runc --ulimit "nofile=4096:4096" --ulimit "nproc=4096:4096")
	if ! out=$(podman run --rm "${run_flags[@]}" "$tag" version 2>&1); then
		echo "nor with ${run_flags[*]}: $out"
		echo "containers cannot run on this machine: checked the image's metadata, size and contents only"
		exit 0
	fi
	echo "with ${run_flags[*]}: $out"
else
	echo "$out"
fi
case "$out" in "sluice "*) ;; *) fail "sluice version printed '$out'" ;; esac

podman run -d --name "$name" --network host "${run_flags[@]}" "$tag" \
	serve --listen 127.0.0.1:17400 --http-listen 127.0.0.1:17490 --log-level info >/dev/null
ready=
for _ in $(seq 1 100); do
	if podman logs "$name" 2>&1 | grep -q 'msg=ready'; then
		ready=1
		break
	fi
	if [ "$(podman inspect "$name" --format '{{.State.Running}}')" != true ]; then
		break
	fi
	sleep 0.1
done
if [ -z "$ready" ]; then
	podman logs "$name" >&2 || true
	fail "the server in the container did not become ready in 10 s"
fi
pos=$("$bin" pub --server 127.0.0.1:17400 image-check "hello from the host") || fail "publish to the container"
got=$(timeout 20 "$bin" sub --server 127.0.0.1:17400 --from earliest --count 1 image-check) || fail "subscribe from the container"
echo "published at $pos; subscriber got: $got"
[ "$got" = "$pos	hello from the host" ] || fail "subscriber got '$got', want '$pos<TAB>hello from the host'"
podman stop -t 20 "$name" >/dev/null
code=$(podman inspect "$name" --format '{{.State.ExitCode}}')
podman logs "$name" 2>&1 | tail -n 2
[ "$code" = 0 ] || fail "the server exited with status $code after SIGTERM, want 0"
echo "image check passed: $tag, $size bytes"

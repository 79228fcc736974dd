#!/usr/bin/env bash
# Builds infergate's container image from this tree (Containerfile) with buildah, then checks
# the image without running a container engine: its user, entrypoint and exposed ports, and
# the binary inside it (`--version`, `print-config | check-config`) run in a chroot of the
# image (buildah run --isolation chroot: no runtime, no user namespace needed).
#
#   scripts/build-image.sh [--local-base] [--tag NAME] [--check-only] [-- extra buildah bud args]
#
# --check-only: the checks alone, on an image built before.
# --local-base: no registry is reachable (only the Debian archive): builds a Debian 12 base
#   image here with debootstrap (minbase, from the apt sources' mirror) and uses it for both
#   stages (the runtime stage is then the minbase image, not bookworm-slim).
# Needs root (or a rootless buildah set-up); installs buildah and debootstrap when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
tag=localhost/infergate:latest
local_base=0
check_only=0
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --local-base) local_base=1 ;;
    --tag) tag=$2; shift ;;
    --check-only) check_only=1 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "usage: $0 [--local-base] [--tag NAME] [--check-only] [-- buildah bud args]" >&2; exit 2 ;;
  esac
  shift
done
need=()
command -v buildah >/dev/null || need+=(buildah)
[ "$local_base" = 1 ] && ! command -v debootstrap >/dev/null && need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
  echo "build-image: installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
fi
args=(--isolation chroot --layers=false -t "$tag" -f Containerfile)
if [ "$check_only" = 1 ]; then
  :
elif [ "$local_base" = 1 ]; then
  base=localhost/infergate-base:bookworm
  if ! buildah inspect --type image "$base" >/dev/null 2>&1; then
    mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\/*\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
    mirror=${mirror:-http://deb.debian.org/debian}
    root=$(mktemp -d /tmp/infergate-base.XXXXXX)
    trap 'rm -rf "$root"' EXIT
    echo "build-image: debootstrap bookworm (minbase) from $mirror"
    debootstrap --variant=minbase bookworm "$root" "$mirror" >/dev/null
    tar -C "$root" -c . | buildah import - "$base" >/dev/null 2>&1 \
      || { ctr=$(buildah from scratch); mnt=$(buildah mount "$ctr"); cp -a "$root"/. "$mnt"/;
           buildah umount "$ctr" >/dev/null; buildah commit -q "$ctr" "$base" >/dev/null;
           buildah rm "$ctr" >/dev/null; }
  fi
  args+=(--build-arg "BASE=$base" --build-arg "RUNTIME_BASE=$base")
fi
if [ "$check_only" = 0 ]; then
  echo "build-image: buildah bud ${args[*]} ${extra[*]:-}"
  start=$(date +%s)
  buildah bud "${args[@]}" "${extra[@]}" .
  echo "build-image: built $tag in $(( $(date +%s) - start )) s"
fi

# The checks: what the Kubernetes manifests rely on (deploy/kubernetes, docs/DEPLOY.md).
buildah inspect --type image "$tag" | /usr/bin/python3 -c '
import json, sys
c = json.load(sys.stdin)["OCIv1"]["config"]
got = (c.get("User"), c.get("Entrypoint"), sorted(c.get("ExposedPorts", {})), c.get("Cmd"))
print("build-image: user %s, entrypoint %s, ports %s, cmd %s" % got)
want = ("65532:65532", ["/usr/local/bin/infergate"], ["8000/tcp", "8001/tcp", "8002/tcp"], ["run"])
sys.exit(0 if got == want else "build-image: expected %s" % (want,))'
ctr=$(buildah from "$tag")
trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
buildah run --isolation chroot "$ctr" -- /usr/local/bin/infergate --version
buildah run --isolation chroot "$ctr" -- sh -c \
  '/usr/local/bin/infergate print-config > /tmp/default.yaml && /usr/local/bin/infergate check-config -c /tmp/default.yaml'
# Every shared library the binary loads is in the image.
libs=$(buildah run --isolation chroot "$ctr" -- ldd /usr/local/bin/infergate)
if grep -q "not found" <<<"$libs"; then
  echo "build-image: shared libraries missing from the image:" >&2
  grep "not found" <<<"$libs" >&2
  exit 1
fi
echo "build-image: the binary's $(grep -c '=>' <<<"$libs") shared libraries are all in the image"
# It serves: the embedded default (socket mode, the identity model) as the image's user, on
# loopback ports of its own (chroot isolation shares the host's network), for 8 s.
buildah run --isolation chroot "$ctr" -- sh -c \
  '/usr/local/bin/infergate print-config | sed "s/port: 8000/port: 18000/; s/port: 8002/port: 18002/; s/address: 0.0.0.0/address: 127.0.0.1/" > /tmp/c.yaml && exec timeout -s TERM 8 /usr/local/bin/infergate run -c /tmp/c.yaml' \
  > /tmp/infergate-image-run.log 2>&1 &
runner=$!
body='{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}]}'
code=000
for _ in $(seq 50); do
  code=$(curl -s -o /tmp/infergate-image-infer.json -w '%{http_code}' -d "$body" \
           http://127.0.0.1:18000/v2/models/identity/infer || true)
  [ "$code" = 200 ] && break
  sleep 0.1
done
wait "$runner" || true  # timeout's SIGTERM: the gateway drains and exits
if [ "$code" != 200 ] || ! grep -q '"outputs"' /tmp/infergate-image-infer.json; then
  echo "build-image: the image did not serve an inference (HTTP $code):" >&2
  cat /tmp/infergate-image-run.log >&2
  exit 1
fi
echo "build-image: served an inference from the image (HTTP 200; $(grep -c . /tmp/infergate-image-run.log) log lines)"
size=$(buildah images --format '{{.Size}}' "$tag" 2>/dev/null | head -1 || true)
echo "build-image: ok: $tag${size:+ ($size)}"

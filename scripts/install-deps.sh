#!/usr/bin/env bash
# Installs every Debian package infergate's build, tests, benchmarks and demo need.
# Idempotent and non-interactive; run as root (or through sudo).
set -euo pipefail

PKGS=(
  # toolchain
  build-essential cmake ninja-build pkg-config clang llvm
  # BPF / XDP
  libbpf-dev libxdp-dev bpftool xdp-tools libelf-dev zlib1g-dev linux-libc-dev
  # codecs, config, CLI, logging
  node-llhttp libnghttp2-dev libc-ares-dev libsimdjson-dev libyaml-cpp-dev libcli11-dev libspdlog-dev
  libfmt-dev libabsl-dev
  # gRPC / protobuf (later issues)
  libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc
  # DPDK (the optional dpdk mode: cmake -DINFERGATE_WITH_DPDK=ON; scripts/test.sh builds it)
  libdpdk-dev
  # least privilege: the seccomp filter (app/privileges.cc); systemd-analyze checks the unit
  libseccomp-dev systemd
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # real peers and tools used by tests, the demo and benchmarks
  curl wrk nginx-light nghttp2-client python3 python3-grpcio python3-grpc-tools python3-h2
  iproute2 ethtool procps psmisc gnuplot-nox hping3 tmux  # tmux: test_top.py drives `infergate top` in a pane
  # deploy/ (Kubernetes manifests, dashboard, alert rules): read by their tests
  python3-yaml
)
# `kubectl kustomize` renders deploy/kubernetes in tests/integration/test_deploy_manifests.py:
# Debian's kubernetes-client, unless a kubectl from elsewhere (which would own
# /usr/bin/kubectl) is already installed.
if ! command -v kubectl >/dev/null 2>&1; then PKGS+=(kubernetes-client); fi

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
# nginx-light's package starts a system nginx on port 80; infergate's scripts run their own.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet nginx 2>/dev/null; then
  $SUDO systemctl stop nginx || true
fi
echo "install-deps: done"

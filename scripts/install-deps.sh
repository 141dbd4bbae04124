#!/usr/bin/env bash
# Installs what building and testing libnccl-net-gdr needs on Debian 12 (or Ubuntu).
# Idempotent: does nothing when everything is present. Needs root (or sudo) when it must install.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libibverbs-dev libcmocka-dev ibverbs-utils
      python3 python3-yaml python3-matplotlib valgrind dpkg-dev rpm file binutils procps iproute2 shellcheck
      clang-format-14 clang libclang-rt-dev clang-19)
pkgs+=(python3-jsonschema) # packaging.k8s-schema: the Kubernetes manifests against packaging/k8s/schemas
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"

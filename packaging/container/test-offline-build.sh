#!/usr/bin/env bash
# test-offline-build.sh: build the image offline with podman from a local base image and the local .deb, then run
# the installed tools inside the image's file system.
#
# Usage (root, from anywhere): packaging/container/test-offline-build.sh [--base IMAGE] [--keep] [BUILD_DIR]
#   BUILD_DIR     a package build (default: build-pkg; configured and built as the README does if missing)
#   --base IMAGE  a base image already in podman's local storage. Without it, one is made first from a Debian 12
#                 minbase root file system (debootstrap: this step alone uses the Debian mirror) and imported as
#                 localhost/gdrnet-offline-base:12.
#   --keep        keep the built image (localhost/gdrnet-offline-test:latest)
#
# The build runs `podman build --pull=never --isolation=chroot` inside `unshare -n`, a network namespace with no
# interface, so any network access fails it (chroot isolation needs no cgroup setup, which some hosts' podman lacks;
# it takes the caller's network, here none). Then, in the image's mounted file system (chroot): the plugin and the
# tools are where the package puts them, gdrnet-doctor --version and gdrnet-perf --local --transport tcp --check run.
# Needs: podman (Debian: podman), debootstrap without --base, cmake/cpack. Exit 0 only if everything passed.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$(cd "$HERE/../.." && pwd)"
BASE=""
KEEP=0
BUILD=""
while [ $# -gt 0 ]; do
  case "$1" in
    --base) [ $# -ge 2 ] || { echo "test-offline-build.sh: --base needs an image" >&2; exit 2; }; BASE="$2"; shift ;;
    --keep) KEEP=1 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "test-offline-build.sh: unknown option $1" >&2; exit 2 ;;
    *) BUILD="$1" ;;
  esac
  shift
done
BUILD="${BUILD:-$SRC/build-pkg}"
IMAGE=localhost/gdrnet-offline-test:latest
command -v podman >/dev/null || { echo "test-offline-build.sh: podman is not installed (apt-get install podman)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "test-offline-build.sh: run as root (podman image mount, unshare -n)" >&2; exit 2; }

echo "== the package ($BUILD)"
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  cmake -S "$SRC" -B "$BUILD" -DCMAKE_INSTALL_PREFIX=/usr -DGDRNET_BUILD_TESTS=OFF >/dev/null
fi
cmake --build "$BUILD" -j"$(nproc)" >/dev/null
(cd "$BUILD" && cpack -G DEB >/dev/null)
deb="$(ls "$BUILD"/packages/libnccl-net-gdr_*.deb | head -n 1)"
echo "$deb"
# the Dockerfile takes the .deb from build-pkg/packages in the context
if [ "$(cd "$BUILD" && pwd)" != "$SRC/build-pkg" ]; then
  mkdir -p "$SRC/build-pkg/packages"
  cp "$deb" "$SRC/build-pkg/packages/"
fi

if [ -z "$BASE" ]; then
  BASE=localhost/gdrnet-offline-base:12
  if ! podman image exists "$BASE"; then
    echo "== base image $BASE (debootstrap: the only step that uses the network)"
    command -v debootstrap >/dev/null || { echo "test-offline-build.sh: debootstrap is not installed" >&2; exit 2; }
    root="$(mktemp -d "${TMPDIR:-/tmp}/gdrnet-rootfs.XXXXXX")"
    debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >/dev/null
    tar -C "$root" -c . | podman import - "$BASE" >/dev/null
    rm -rf "$root"
  fi
fi
podman image exists "$BASE" || { echo "test-offline-build.sh: no local image $BASE" >&2; exit 2; }

echo "== podman build, offline (no network namespace interface, --pull=never, OFFLINE=1)"
cd "$SRC"
unshare -n podman build --isolation=chroot --pull=never -f packaging/container/Dockerfile \
  --build-arg PACKAGES=packages-from-context --build-arg OFFLINE=1 --build-arg BASE_IMAGE="$BASE" -t "$IMAGE" . |
  grep -E '^(gdrnet:|Successfully|\[[0-9]/[0-9]\] STEP [0-9]+/[0-9]+: (FROM|COPY))'

echo "== the image"
mnt="$(podman image mount "$IMAGE")"
fail=0
for f in usr/bin/gdrnet-perf usr/bin/gdrnet-doctor usr/bin/gdrnet-run-matrix usr/lib/x86_64-linux-gnu/libnccl-net-gdr.so; do
  if [ -e "$mnt/$f" ]; then echo "PASS: /$f"; else echo "FAIL: /$f missing"; fail=1; fi
done
if podman image inspect "$IMAGE" --format '{{.Config.Env}}' | grep -q 'NCCL_NET_PLUGIN=gdr NCCL_NET=GDR'; then
  echo "PASS: ENV NCCL_NET_PLUGIN=gdr NCCL_NET=GDR"
else
  echo "FAIL: ENV"; fail=1
fi
if chroot "$mnt" /usr/bin/gdrnet-doctor --version; then echo "PASS: gdrnet-doctor --version"; else fail=1; fi
if timeout 300 chroot "$mnt" env -i PATH=/usr/bin:/bin /usr/bin/gdrnet-perf --local --transport tcp --check \
     --sizes 1:1M --iters 20 | tail -n 2; then
  echo "PASS: gdrnet-perf --local --transport tcp --check in the image"
else
  echo "FAIL: gdrnet-perf in the image"; fail=1
fi
podman image unmount "$IMAGE" >/dev/null
[ "$KEEP" -eq 1 ] || podman rmi "$IMAGE" >/dev/null
if [ "$fail" -eq 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL"; fi
exit "$fail"

#!/usr/bin/env bash
# Build the base image of every ElasticCTR image from Debian packages (docs/images.md):
# debootstrap (minbase) of Debian bookworm with Python 3.11 and what Paddle's native code
# links, the host's Debian updates applied, user elasticctr (uid/gid 10001) created, docs
# and apt lists removed, then `docker import`. No image is pulled from anywhere.
#
# The mirror is the host's own (its apt sources), never a fixed host name. The image is
# tagged elasticctr-base:<key>, where <key> hashes RECIPE (bump it when the rootfs steps
# below change), the package list and the versions the host's apt would install of them, so
# a Debian update or a recipe change makes a new base and nothing else does. The rootfs tarball is cached in
# $ELASTICCTR_IMAGES_CACHE/base-<key>.tar (default ~/.cache/elasticctr/images): an empty
# Docker re-imports it in seconds instead of running debootstrap again (~2 min).
# Prints the image reference. Needs root (debootstrap, chroot) and dockerd (dockerd.sh).
#   scripts/images/base.sh [--plain] [--arch ARCH]
#     --plain      only minbase and the updates, no package of images/packages.txt and no
#                  user: what a public `debian:bookworm-slim` holds, for the tests of a
#                  `docker build` on such a base (images/Dockerfile, CONTEXT=source);
#                  tagged elasticctr-debian-slim:<arch>-<key>
#     --arch ARCH  a Debian architecture other than the host's (arm64): debootstrap runs the
#                  target's binaries through qemu-user-static's binfmt_misc handlers
set -euo pipefail
cd "$(dirname "$0")/../.."

SUITE=bookworm
RECIPE=1
PLAIN=0
ARCH=$(dpkg --print-architecture)
while [ $# -gt 0 ]; do
  case "$1" in
    --plain) PLAIN=1 ;;
    --arch) ARCH=${2:?--arch needs a Debian architecture}; shift ;;
    *) echo "usage: $0 [--plain] [--arch ARCH]" >&2; exit 2 ;;
  esac
  shift
done
# The packages: images/packages.txt (the Dockerfile's os-source stage installs the same list).
mapfile -t PACKAGES < <(grep -v -e '^#' -e '^[[:space:]]*$' images/packages.txt)
CACHE="${ELASTICCTR_IMAGES_CACHE:-$HOME/.cache/elasticctr/images}"
DOCKER=$(scripts/images/dockerd.sh)
mkdir -p "$CACHE"

# The host's Debian mirror for $SUITE: deb822 sources first, then one-line sources.
mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v suite="$SUITE" '
      /^[[:space:]]*$/ { if (uri != "" && hit) { print uri; exit } uri = ""; hit = 0; next }
      $1 == "URIs:" { uri = $2 }
      $1 == "Suites:" { for (i = 2; i <= NF; i++) if ($i == suite) hit = 1 }
      END { if (uri != "" && hit) print uri }' "$f" | head -n 1
  done
  { cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true; } \
    | awk -v suite="$SUITE" '$1 == "deb" && $3 == suite { print $2; exit }'
}
MIRROR=$(mirror | head -n 1 || true)
[ -n "$MIRROR" ] || { echo "base.sh: no Debian $SUITE mirror in the host's apt sources" >&2; exit 1; }

versions=$(apt-cache policy "${PACKAGES[@]}" python3.11 libpython3.11-stdlib 2>/dev/null \
  | awk '/^[^ ]/ { p = $1 } $1 == "Candidate:" { print p, $2 }')
# The host's own architecture, full image: the key every earlier cache was made with.
recipe="recipe $RECIPE $SUITE ${PACKAGES[*]}"
[ "$PLAIN" = 0 ] || recipe="$recipe plain"
[ "$ARCH" = "$(dpkg --print-architecture)" ] || recipe="$recipe arch $ARCH"
KEY=$( { echo "$recipe"; echo "$versions"; } | sha256sum | cut -c1-16)
if [ "$PLAIN" = 1 ]; then
  IMAGE="elasticctr-debian-slim:$ARCH-$KEY"
  TAR="$CACHE/debian-slim-$ARCH-$KEY.tar"
  include=()
else
  [ "$ARCH" = "$(dpkg --print-architecture)" ] || IMAGE_SUFFIX="-$ARCH"
  IMAGE="elasticctr-base:$KEY${IMAGE_SUFFIX:-}"
  TAR="$CACHE/base-$KEY.tar"
  include=(--include="$(IFS=,; echo "${PACKAGES[*]}")")
fi

if "$DOCKER" image inspect "$IMAGE" >/dev/null 2>&1; then echo "$IMAGE"; exit 0; fi

if [ ! -s "$TAR" ]; then
  [ "$ARCH" = "$(dpkg --print-architecture)" ] || scripts/images/qemu.sh >/dev/null
  command -v debootstrap >/dev/null || scripts/images/dockerd.sh >/dev/null
  tmp=$(mktemp -d "$CACHE/.base.XXXXXX")
  # Never delete through a mount debootstrap left behind (proc, sys) on a failure.
  cleanup() {
    awk -v r="$tmp/" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r | xargs -r -n1 umount -l
    rm -rf "$tmp"
  }
  trap cleanup EXIT
  root="$tmp/rootfs"
  echo "base.sh: debootstrap $SUITE $ARCH from $MIRROR (~2 min; 10 under qemu) ..." >&2
  debootstrap --variant=minbase --arch="$ARCH" "${include[@]}" "$SUITE" "$root" "$MIRROR" \
    >"$tmp/debootstrap.log" 2>&1 || { tail -n 30 "$tmp/debootstrap.log" >&2; exit 1; }
  # Updates (security, point releases) from the host's own sources, as the host has them.
  cp -r /etc/apt/sources.list.d "$root/etc/apt/"
  [ -f /etc/apt/sources.list ] && cp /etc/apt/sources.list "$root/etc/apt/"
  rm -f "$root/etc/apt/sources.list.d/"*.disabled* "$root/etc/apt/sources.list.d/"*.list
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive sh -ec '
    apt-get update -qq
    apt-get -y -qq -o Dpkg::Options::=--force-confold upgrade
    apt-get clean
    [ "$0" = 1 ] && exit 0
    groupadd --system --gid 10001 elasticctr
    useradd --system --uid 10001 --gid 10001 --home-dir /tmp --no-create-home \
      --shell /usr/sbin/nologin elasticctr
  ' "$PLAIN" >>"$tmp/debootstrap.log" 2>&1 || { tail -n 30 "$tmp/debootstrap.log" >&2; exit 1; }
  chroot "$root" dpkg-query -W -f '${Package} ${Version}\n' >"${TAR%.tar}.packages"
  : >"$root/etc/resolv.conf"
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/log/* \
    "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
    "$root"/usr/share/locale/* "$root"/tmp/* "$root"/root/.[!.]* 2>/dev/null || true
  find "$root/usr/lib/python3" "$root/usr/lib/python3.11" -name __pycache__ -prune \
    -exec rm -rf {} + 2>/dev/null || true
  # Reproducible tarball: fixed order and owners, mtimes kept (dpkg's, not the build's).
  tar --sort=name --numeric-owner -C "$root" -cf "$tmp/base.tar" .
  mv "$tmp/base.tar" "$TAR"
fi

echo "base.sh: importing $TAR as $IMAGE ..." >&2
if [ "$ARCH" = "$(dpkg --print-architecture)" ]; then
  "$DOCKER" import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/sh"]' \
    --message "elasticctr base: Debian $SUITE $ARCH minbase${include:+ + ${PACKAGES[*]}}" \
    "$TAR" "$IMAGE" >/dev/null
else
  # dockerd 20.10's `docker import` records the host's architecture whatever --platform
  # says; a scratch build for the target platform records the target's.
  ctx=$(mktemp -d "$CACHE/.import.XXXXXX")
  ln "$TAR" "$ctx/rootfs.tar" 2>/dev/null || cp "$TAR" "$ctx/rootfs.tar"
  cat >"$ctx/Dockerfile" <<'DOCKERFILE'
FROM scratch
ADD rootfs.tar /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
CMD ["/bin/sh"]
DOCKERFILE
  DOCKER_BUILDKIT=1 "$DOCKER" build --quiet --platform "linux/$ARCH" -t "$IMAGE" "$ctx" >/dev/null \
    || { rm -rf "$ctx"; echo "base.sh: importing the $ARCH rootfs failed" >&2; exit 1; }
  rm -rf "$ctx"
fi
echo "$IMAGE"

#!/usr/bin/env bash
# Let this x86-64 host run arm64 binaries (docs/images.md "arm64"): Debian's
# qemu-user-static and binfmt-support (apt when missing), binfmt_misc mounted and the
# qemu-aarch64 handler enabled with the F (fix-binary) flag, so containers and
# `docker build --platform linux/arm64` steps run arm64 code without qemu in their root.
# Idempotent; needs root. Prints the handler's flags.
set -euo pipefail
HANDLER=/proc/sys/fs/binfmt_misc/qemu-aarch64
if [ "$(uname -m)" = aarch64 ]; then echo "native"; exit 0; fi
if ! [ -x /usr/bin/qemu-aarch64-static ] || ! command -v update-binfmts >/dev/null; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "qemu.sh: install qemu-user-static and binfmt-support (Debian) as root first" >&2
    exit 1
  fi
  echo "qemu.sh: apt-get install qemu-user-static binfmt-support ..." >&2
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y \
    --no-install-recommends qemu-user-static binfmt-support >&2
fi
[ -e /proc/sys/fs/binfmt_misc/status ] \
  || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc \
  || { echo "qemu.sh: cannot mount binfmt_misc (not root, or no kernel support)" >&2; exit 1; }
[ -e "$HANDLER" ] || update-binfmts --enable qemu-aarch64 >&2
[ -e "$HANDLER" ] || { echo "qemu.sh: no qemu-aarch64 binfmt handler after update-binfmts" >&2; exit 1; }
flags=$(sed -n 's/^flags: //p' "$HANDLER")
case "$flags" in
  *F*) echo "$flags" ;;
  *) echo "qemu.sh: the qemu-aarch64 handler lacks the F flag ($flags): containers cannot use it" >&2; exit 1 ;;
esac

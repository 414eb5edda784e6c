#!/usr/bin/env bash
# Builds (once) a Debian sid root file system with gcc and binutils, whose
# assembler writes SFrame version 3. The SFrame tests compile and run their
# programs inside it. It is cached outside the checkout so CI builds it once
# per machine: LIVEUNWIND_SID_ROOT, default /var/cache/liveunwind/sid-rootfs.
set -euo pipefail
root=${LIVEUNWIND_SID_ROOT:-/var/cache/liveunwind/sid-rootfs}
mirror=${LIVEUNWIND_DEBIAN_MIRROR:-http://deb.debian.org/debian}
if [ -x "$root/usr/bin/gcc" ]; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v debootstrap >/dev/null; then
    echo "sid-rootfs: needs root and debootstrap; the SFrame v3 tests will be skipped" >&2
    exit 0
fi
mkdir -p "$(dirname "$root")"
rm -rf "$root.partial"
if debootstrap --variant=minbase --include=gcc,libc6-dev,binutils sid "$root.partial" "$mirror" \
    >"$root.log" 2>&1; then
    mv "$root.partial" "$root"
    echo "sid-rootfs: built $root"
else
    echo "sid-rootfs: debootstrap failed (see $root.log); the SFrame v3 tests will be skipped" >&2
fi

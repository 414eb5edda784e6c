#!/usr/bin/env bash
# Builds (once) a Debian sid root file system with gcc and binutils, whose
# assembler writes SFrame version 3, and Debian's newest CPythons (its python3 and
# 3.15) with their headers. The SFrame tests compile and run their programs
# inside it; the --python tests run those CPythons in it. It is cached outside the checkout so
# CI builds it once per machine: LIVEUNWIND_SID_ROOT, default
# /var/cache/liveunwind/sid-rootfs.
set -euo pipefail
root=${LIVEUNWIND_SID_ROOT:-/var/cache/liveunwind/sid-rootfs}
mirror=${LIVEUNWIND_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# The Pythons the --python tests run: sid's default python3, and 3.15 beside it.
pythons="python3 libpython3-dev python3.15 python3.15-dev"
if [ -x "$root/usr/bin/gcc" ]; then
    # A root built before a Python was part of it: add it (never fatal; the
    # --python tests skip, saying why, without it).
    if { [ ! -x "$root/usr/bin/python3" ] || [ ! -x "$root/usr/bin/python3.15" ]; } \
        && [ "$(id -u)" = 0 ]; then
        apt="apt-get -o Acquire::Check-Valid-Until=false"
        if chroot "$root" env DEBIAN_FRONTEND=noninteractive sh -c \
            "$apt update && $apt install -y $pythons" >>"$root.log" 2>&1; then
            echo "sid-rootfs: added $pythons to $root"
        else
            echo "sid-rootfs: could not add $pythons (see $root.log); their tests will be skipped" >&2
        fi
    fi
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v debootstrap >/dev/null; then
    echo "sid-rootfs: needs root and debootstrap; the SFrame v3 tests will be skipped" >&2
    exit 0
fi
mkdir -p "$(dirname "$root")"
rm -rf "$root.partial"
if debootstrap --variant=minbase --include=gcc,libc6-dev,binutils,"${pythons// /,}" \
    sid "$root.partial" "$mirror" \
    >"$root.log" 2>&1; then
    mv "$root.partial" "$root"
    echo "sid-rootfs: built $root"
else
    echo "sid-rootfs: debootstrap failed (see $root.log); the SFrame v3 tests will be skipped" >&2
fi

#!/usr/bin/env bash
# Builds (once) free-threaded CPython (--disable-gil) from Debian's own source
# package, inside the sid root file system (tools/sid-rootfs.sh), installed
# there under /opt/python${VERSION}t: Debian ships no free-threaded interpreter.
# The --python tests run it in a chroot as they run sid's python3, and skip,
# saying why, without it. About 4.5 minutes of CPU (no PGO, no tests; 55 minutes
# of wall time once on a machine shared by ten jobs), once per machine: the result
# stays in the cached root.
# LIVEUNWIND_FREETHREADED_VERSIONS: the versions, default "3.13" (the mirror here
# serves the source of python3.13 only: 3.14's and 3.15's answer 404).
set -euo pipefail
root=${LIVEUNWIND_SID_ROOT:-/var/cache/liveunwind/sid-rootfs}
versions=${LIVEUNWIND_FREETHREADED_VERSIONS:-3.13}
if [ ! -x "$root/usr/bin/gcc" ] || [ "$(id -u)" != 0 ]; then
    echo "freethreaded-python: needs root and the sid root file system (make sid-rootfs);" \
        "the free-threaded --python tests will be skipped" >&2
    exit 0
fi
log="$root.freethreaded.log"
apt="apt-get -o Acquire::Check-Valid-Until=false"
for version in $versions; do
    prefix="/opt/python${version}t"
    if [ -x "$root$prefix/bin/python${version}t" ]; then
        continue
    fi
    echo "freethreaded-python: building CPython ${version}t in $root$prefix (log: $log)"
    if ! chroot "$root" env DEBIAN_FRONTEND=noninteractive VERSION="$version" PREFIX="$prefix" \
        APT="$apt" sh -euc '
        echo "deb-src http://deb.debian.org/debian sid main" \
            >/etc/apt/sources.list.d/liveunwind-src.list
        $APT update
        $APT install -y --no-install-recommends make dpkg-dev xz-utils libffi-dev zlib1g-dev
        rm -rf /tmp/freethreaded-build && mkdir /tmp/freethreaded-build && cd /tmp/freethreaded-build
        # The newest source release the mirror serves (it may lack the newest listed).
        for release in $(apt-cache showsrc "python$VERSION" | sed -n "s/^Version: //p" \
            | sort -rV); do
            $APT source --download-only "python$VERSION=$release" && break
        done
        dpkg-source --no-check -x python"$VERSION"_*.dsc src
        cd src
        ./configure --disable-gil --prefix="$PREFIX" --without-ensurepip --with-pydebug=no
        make -j"$(nproc)"
        make altinstall
        cd / && rm -rf /tmp/freethreaded-build
    ' >>"$log" 2>&1; then
        echo "freethreaded-python: the build of ${version}t failed (see $log);" \
            "its tests will be skipped" >&2
    fi
done

#!/usr/bin/env bash
# Builds (once) CPython 3.11 from Debian's own source package (bookworm's python3.11) with
# --enable-shared and nothing stripped, installed under /var/cache/liveunwind/python3.11-shared:
# bench/run.py's "CPython 3.11 from source" target, whose symbols live in an unstripped
# libpython3.11.so (Debian's own python3.11 links the interpreter into its executable, stripped,
# with the symbols in python3.11-dbg's debug file instead).  The source index is fetched into a
# private apt directory: the host's apt configuration is left as it was.  No PGO, no tests.
# Prints the prefix; exits 1 (saying why) when the build fails.
set -euo pipefail
prefix=${LIVEUNWIND_SHARED_PYTHON:-/var/cache/liveunwind/python3.11-shared}
if [ -x "$prefix/bin/python3.11" ]; then
    echo "$prefix"
    exit 0
fi
work=$(mktemp -d /var/tmp/liveunwind-python.XXXXXX)
trap 'rm -rf "$work"' EXIT
log="$prefix.log"
mkdir -p "$(dirname "$prefix")" "$work/lists/partial"
cd "$work"
echo "deb-src http://deb.debian.org/debian bookworm main" >"$work/sources.list"
apt=(apt-get -o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=-"
    -o "Dir::State::Lists=$work/lists")
echo "shared-python: building CPython 3.11 in $prefix (log: $log)" >&2
# A child shell: errexit holds in it (it would not in a subshell tested by `if`).
if ! APT="${apt[*]}" PREFIX="$prefix" bash -euo pipefail -c '
    $APT update
    $APT source --download-only python3.11
    dpkg-source --no-check -x python3.11_*.dsc src
    cd src
    ./configure --enable-shared --prefix="$PREFIX" --without-ensurepip \
        LDFLAGS="-Wl,-rpath,$PREFIX/lib" CFLAGS="-g -O2"
    nice -n 19 make -j"$(nproc)"
    make altinstall
' >"$log" 2>&1; then
    echo "shared-python: the build failed (see $log)" >&2
    exit 1
fi
echo "$prefix"

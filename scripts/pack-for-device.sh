#!/usr/bin/env bash
# Packs the build's binaries and libraries (stripped, xz) into .carry/ for the
# device tool's `carry`. On the device: tar xJf .carry/kiln.tar.xz -C /tmp/k
# and LD_LIBRARY_PATH=/tmp/k/lib; scripts/device-run.sh does that and runs
# the jobs it is given.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${KILN_BUILD_DIR:-build}"
stage=$(mktemp -d)
mkdir -p "$stage/lib" "$stage/bin" .carry
cp "$BUILD"/compiler/libkiln.so "$BUILD"/runtime/libkiln_runtime.so \
   "$BUILD"/kernels/libkiln_kernels.so "$BUILD"/python/libkiln_c.so \
   "$BUILD"/examples/libkiln_example_tunable.so "$stage/lib/"
cp "$(ldconfig -p | awk '/libfmt.so.9 /{print $NF; exit}')" "$stage/lib/" 2>/dev/null || true
cp "$BUILD"/tests/kiln-tests "$BUILD"/tools/kiln "$BUILD"/examples/attention-demo "$BUILD"/examples/rmsnorm "$stage/bin/"
[ -f "$BUILD"/tools/kiln-bench ] && cp "$BUILD"/tools/kiln-bench "$stage/bin/"
strip "$stage"/lib/* "$stage"/bin/*
tar cJf .carry/kiln.tar.xz -C "$stage" .
git rev-parse --short HEAD > .carry/commit
rm -rf "$stage"
ls -la .carry/kiln.tar.xz

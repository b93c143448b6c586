#!/usr/bin/env bash
# Configures and builds kiln in ./build (or $KILN_BUILD_DIR). Arguments are
# ninja targets; none builds everything.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${KILN_BUILD_DIR:-build}"
JOBS="${KILN_JOBS:-2}"
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
ninja -C "$BUILD" -j"$JOBS" "$@"

#!/usr/bin/env bash
# Installs the build into a private prefix, then configures, builds and runs
# examples/consumer against it with find_package(kiln): what a project that
# uses an installed kiln does. Usage: tests/consumer.sh <build dir> <work dir>
set -euo pipefail
build=$1 work=$2
src="$(cd "$(dirname "$0")/.." && pwd)"
rm -rf "$work"
cmake --install "$build" --prefix "$work/prefix" > "$work.install.log"
# Only kiln's own files, and no MLIR header among them.
if grep -rl "mlir/" "$work/prefix/include" >/dev/null 2>&1; then
  echo "consumer: an installed header includes MLIR" >&2
  exit 1
fi
cmake -S "$src/examples/consumer" -B "$work/build" -G Ninja \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$work/build" > /dev/null
"$work/build/consumer"

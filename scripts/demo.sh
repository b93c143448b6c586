#!/usr/bin/env bash
# Fresh machine to demo: installs what is missing, builds, and runs flash
# attention written in kiln's DSL (on the CPU reference executor until the GPU
# code generation lands).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh attention-demo
"${KILN_BUILD_DIR:-build}"/examples/attention-demo "$@"

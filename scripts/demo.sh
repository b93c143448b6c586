#!/usr/bin/env bash
# Fresh machine to demo: installs what is missing, builds, and runs flash
# attention written in kiln's DSL: JIT-compiled on the GPU when there is one,
# else on the CPU reference executor.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh attention-demo
"${KILN_BUILD_DIR:-build}"/examples/attention-demo "$@"

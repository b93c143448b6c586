#!/usr/bin/env bash
# Fresh machine to test results: installs what is missing, builds everything
# and runs every test (gtest suites and lit/FileCheck tests) through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd "${KILN_BUILD_DIR:-build}"
ctest --output-on-failure -j"${KILN_JOBS:-2}"

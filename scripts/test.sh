#!/usr/bin/env bash
# Fresh machine to test results: installs what is missing (apt; torch and
# pytest through pip), builds everything and runs every test (gtest suites,
# lit/FileCheck tests, the Python package's pytest suite) through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/setup-python.sh
scripts/build.sh
cd "${KILN_BUILD_DIR:-build}"
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then
  echo "=================================================================="
  echo "No CUDA driver on this machine: every GPU test below is SKIPPED"
  echo "(they run, and pass, on a GPU machine: see README, 'On a GPU')."
  echo "=================================================================="
fi
ctest --output-on-failure -j"${KILN_JOBS:-2}"

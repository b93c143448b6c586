#!/usr/bin/env bash
# Installs what the Python package and its tests need through pip: torch
# (>= 2.4 for torch.library.custom_op; PyPI's wheel, about 3 GB with its CUDA
# libraries, ~1 min on a fresh machine) and pytest. Idempotent: nothing runs
# when both import. Debian's python3-torch (1.13) is too old.
set -euo pipefail
PY="${PYTHON:-python3}"
if "$PY" -c 'import torch, pytest; assert hasattr(torch.library, "custom_op")' 2>/dev/null; then
  echo "setup-python: torch $("$PY" -c 'import torch; print(torch.__version__)') and pytest are installed"
  exit 0
fi
echo "setup-python: installing torch and pytest with pip"
"$PY" -m pip install --quiet --disable-pip-version-check torch pytest

import os
import sys

# The package from this source tree, whatever is installed.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:
    import torch  # noqa: F401
except ImportError as e:  # the README's test command installs it
    raise SystemExit(f"kiln's Python tests need torch ({e}): run "
                     f"scripts/setup-python.sh") from e

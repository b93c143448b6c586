import os
import sys

import pytest

# The package from this source tree, whatever is installed.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:
    import torch  # noqa: F401
except ImportError as e:  # the README's test command installs it
    raise SystemExit(f"kiln's Python tests need torch ({e}): run "
                     f"scripts/setup-python.sh") from e


@pytest.fixture
def recorded_graphs():
    """(graphs, backend): a torch.compile backend that keeps each graph it
    is given and runs it as traced."""
    graphs = []

    def backend(gm, inputs):
        graphs.append(gm)
        return gm.forward
    return graphs, backend

"""python3 -m kiln.build_cpp: builds kiln's eager autograd in C++ (_cpp.py)
for the installed torch ahead of the first eager call, and prints where it
is; exits 1 where it cannot be built (the reason is on stderr)."""
import os
import sys

from . import _cpp

if __name__ == "__main__":
    m = _cpp.module()
    if m is None and os.environ.get("KILN_CPP_AUTOGRAD") != "0":
        sys.exit(1)
    print(m.__file__ if m is not None else "KILN_CPP_AUTOGRAD=0: nothing built")

"""numpy, for the column-wise paths (framing, decoding, appending, replaying), loaded without BLAS threads.

numpy's OpenBLAS starts worker threads when it is loaded, with the signal mask of the thread that
loads it. `alertd exec` blocks SIGINT, SIGTERM and SIGHUP in every thread but the one that forwards
them to the trainer; a BLAS thread started earlier with them unblocked would take a SIGTERM and end
alertd instead of passing it on. alertd does no linear algebra: one BLAS thread (none started) is
right, and the variable is put back at once, so that the trainer alertd starts gets the environment
it was given.
"""

from __future__ import annotations

import os
import sys

if "numpy" not in sys.modules:
    _saved = os.environ.get("OPENBLAS_NUM_THREADS")
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy as np
    finally:
        if _saved is None:
            del os.environ["OPENBLAS_NUM_THREADS"]
        else:
            os.environ["OPENBLAS_NUM_THREADS"] = _saved
else:
    import numpy as np

__all__ = ["np"]

"""Keep freed memory in the process instead of returning it to the kernel after every step (glibc only).

glibc returns every freed block above its mmap threshold (at most 32 MB) to the kernel and page-faults it back
in on the next step. Long inputs on CPU allocate many such blocks per step (a 2,048-token Longformer step: 8.4 s
wall, 4.9 s of it kernel time), so the training loop then spends more time in the kernel than in arithmetic.
`keep_freed_memory()` makes glibc keep and reuse freed memory, as a caching allocator does (`mallopt`, the same as
the MALLOC_MMAP_MAX_ / MALLOC_TRIM_THRESHOLD_ environment variables, but settable after start-up). Peak resident
memory grows a little (fragmentation) in exchange.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's mallopt parameter numbers (malloc.h)


def keep_freed_memory() -> bool:
    """Switch glibc to keeping freed memory; False (and nothing changed) on other platforms or C libraries."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    done = bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))
    log.debug("glibc keeps freed memory: %s", done)
    return done

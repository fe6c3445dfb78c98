"""cublasguard: find which cuBLAS/CUDA call broke a run, and why.

The tool is the `cublasguard` command and the `libcublasguard.so` it preloads; this package only
finds them, so that `python -m cublasguard` works wherever pip put them.
"""

from ._find import find_command, find_library

__all__ = ["find_command", "find_library"]

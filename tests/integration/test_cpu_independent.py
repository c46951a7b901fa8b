"""A figure a user reads must not depend on the CPU's SIMD width: `analyze --json` is byte-identical
under OpenBLAS's Haswell (AVX2) and Prescott (SSE3) kernels, which sum in different orders.

The window case is the one whose contention range once moved with them (a rank-deficient
bootstrap resample, attribution/overlap_fit.py's RIDGE): 727636 ns under Haswell, 707115 under
Prescott.
"""

import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import golden  # noqa: E402

CASE = "slow-kernel-8rank-3host-window"
CORETYPES = ("Haswell", "Prescott")


def _why_not() -> str | None:
    """Why OPENBLAS_CORETYPE cannot choose numpy's kernels here, or None."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return f"OpenBLAS's Haswell and Prescott kernels are x86-64 ones; this machine is {platform.machine()}"
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    except (TypeError, KeyError):  # numpy before 1.26 does not say
        return "numpy does not say which BLAS it was built with (numpy.show_config(mode='dicts'))"
    if "openblas" not in str(blas.get("name", "")).lower():
        return f"numpy's BLAS is {blas.get('name')}, not OpenBLAS: OPENBLAS_CORETYPE chooses nothing"
    if "DYNAMIC_ARCH" not in str(blas.get("openblas configuration", "")):
        return "numpy's OpenBLAS is not said to be DYNAMIC_ARCH: OPENBLAS_CORETYPE may choose nothing"
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as cpu
    except ImportError:  # numpy 1.x
        from numpy.core._multiarray_umath import __cpu_features__ as cpu
    if not (cpu.get("AVX2") and cpu.get("FMA3")):
        return "this CPU lacks AVX2/FMA3, which OpenBLAS's Haswell kernels need"
    return None


@pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))
def test_analyze_json_is_the_same_under_two_blas_kernels():
    out = {}
    for coretype in CORETYPES:
        done = subprocess.run([sys.executable, "-m", "nsys_collective", "analyze", *golden.CASES[CASE], "--json"],
                              cwd=ROOT, capture_output=True, env={**os.environ, "OPENBLAS_CORETYPE": coretype})
        assert done.returncode == 0, done.stderr.decode()
        out[coretype] = done.stdout
    assert out["Haswell"] == out["Prescott"], f"analyze {CASE} --json differs between OpenBLAS's Haswell and Prescott kernels"

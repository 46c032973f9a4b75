"""tools/gpu_sass_report.py's reading of cuobjdump's SASS listing (`make gpu-sass-report` runs it
on the real kernels; this case needs neither nvcc nor NVIDIA's tools)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import gpu_sass_report  # noqa: E402

LISTING = """
	code for sm_90
		Function : _ZN3fbn47_GLOBAL__N__x17ApplyChannelsLastIfLi4EEEvNS0_4ArgsIT_EEi
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0100*/                   LDG.E.128 R4, desc[UR6][R2.64] ;
        /*0110*/                   LDG.E.128 R8, desc[UR6][R12.64] ;
        /*0120*/                   LDG.E.64 R14, desc[UR6][R16.64] ;
        /*0200*/                   STG.E.128.STRONG.SM desc[UR6][R18.64], R4 ;
		Function : _ZN3fbn47_GLOBAL__N__x8FinalizeIfEEvNS0_4ArgsIT_EEii
        /*0100*/                   LDG.E R4, desc[UR6][R2.64] ;
        /*0110*/                   STG.E desc[UR6][R18.64], R4 ;
        /*0120*/                   STG.E desc[UR6][R20.64], R5 ;
"""


def test_global_accesses_counted_per_kernel_and_width():
    kernels = gpu_sass_report.accesses_per_kernel(LISTING)
    apply_name, finalize_name = list(kernels)
    assert "ApplyChannelsLast" in apply_name and "Finalize" in finalize_name
    assert kernels[apply_name] == {"LDG.E.128": 2, "LDG.E.64": 1, "STG.E.128.STRONG.SM": 1}
    assert kernels[finalize_name] == {"LDG.E": 1, "STG.E": 2}

"""tools/gpu_code_check.py's reading of PTX: the rules it fails a kernel on (it runs on the real
kernels in `make gpu-code-check` where nvcc exists; these cases need no nvcc)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import gpu_code_check  # noqa: E402

APPLY_HALF_4 = "_ZN3fbn47_GLOBAL__N__x17ApplyChannelsLastINS_4HalfELi4EEEvNS0_4ArgsIT_EEi"
SUM_FLOAT_4 = "_ZN3fbn47_GLOBAL__N__x15SumChannelsLastIfLi4ELb1EEEvNS0_4ArgsIT_EEi"
APPLY_FLOAT_1 = "_ZN3fbn47_GLOBAL__N__x17ApplyChannelsLastIfLi1EEEvNS0_4ArgsIT_EEi"
NORMALIZE_HALF_8 = "_ZN3fbn47_GLOBAL__N__x22NormalizeChannelsFirstINS_4HalfELi8EEEvNS0_11ForwardArgsIT_EEi"
NORMALIZE_FLOAT_1 = "_ZN3fbn47_GLOBAL__N__x21NormalizeChannelsLastIfLi1EEEvNS0_11ForwardArgsIT_EEi"
MOMENTS_HALF_8 = "_ZN3fbn47_GLOBAL__N__x20MomentsChannelsFirstINS_4HalfELi8EEEvNS0_11ForwardArgsIT_EEi"


def test_vector_accesses_pass():
    body = """
	ld.global.f64 	%fd2, [%rd38];
	ld.global.v4.u16 	{%rs1, %rs2, %rs3, %rs4}, [%rd68];
	st.global.wb.v2.u32 	[%rd96], {%r1, %r2};
"""
    assert gpu_code_check.sweep_problems(APPLY_HALF_4, body) == []


def test_a_split_vector_store_fails():
    body = """
	ld.global.v4.f32 	{%f1, %f2, %f3, %f4}, [%rd1];
	st.global.f64 	[%rd5], %fd1;
	st.global.f32 	[%rd2], %f5;
	st.global.f32 	[%rd2+4], %f6;
"""
    assert gpu_code_check.sweep_problems(SUM_FLOAT_4, body) == [
        "a 32-bit scalar store (st.global.f32)"]


def test_a_scalar_16_bit_load_fails_and_so_does_no_vector_load():
    body = """
	ld.global.u16 	%rs1, [%rd68];
	st.global.wb.v2.u32 	[%rd96], {%r1, %r2};
"""
    assert gpu_code_check.sweep_problems(APPLY_HALF_4, body) == [
        "a 16-bit scalar load (ld.global.u16)", "no vector load"]


def test_element_by_element_kernels_are_not_held_to_vectors():
    body = "\tld.global.f32 \t%f1, [%rd1];\n\tst.global.f32 \t[%rd2], %f1;\n"
    assert gpu_code_check.sweep_problems(APPLY_FLOAT_1, body) == []


def test_the_forward_normalize_is_held_to_vectors_where_vectorized():
    body = """
	ld.global.v4.u32 	{%r1, %r2, %r3, %r4}, [%rd1];
	ld.global.f64 	%fd1, [%rd2];
	st.global.u16 	[%rd3], %rs1;
"""
    assert gpu_code_check.sweep_problems(NORMALIZE_HALF_8, body) == [
        "a 16-bit scalar store (st.global.u16)"]
    assert gpu_code_check.sweep_problems(NORMALIZE_FLOAT_1, body) == []


def test_the_forward_moments_are_held_to_vector_loads_where_vectorized():
    vectors = """
	ld.global.v4.u32 	{%r1, %r2, %r3, %r4}, [%rd1];
	st.global.f64 	[%rd5], %fd1;
"""
    assert gpu_code_check.sweep_problems(MOMENTS_HALF_8, vectors) == []
    scalars = "\tld.global.u16 \t%rs1, [%rd1];\n\tst.global.f64 \t[%rd5], %fd1;\n"
    assert gpu_code_check.sweep_problems(MOMENTS_HALF_8, scalars) == [
        "a 16-bit scalar load (ld.global.u16)", "no vector load"]
    assert gpu_code_check.short_name(MOMENTS_HALF_8) == "MomentsChannelsFirst<half,8>"


def test_ptxas_report_and_kernel_names():
    ptx = f".visible .entry {SUM_FLOAT_4}(\n body one\n}}\n.entry {APPLY_HALF_4}(\n body two\n}}\n"
    kernels = list(gpu_code_check.kernels_of(ptx))
    assert [name for name, _ in kernels] == [SUM_FLOAT_4, APPLY_HALF_4]
    assert "body one" in kernels[0][1] and "body two" not in kernels[0][1]
    assert gpu_code_check.short_name(SUM_FLOAT_4) == "SumChannelsLast<float,4,infer>"
    assert gpu_code_check.short_name(APPLY_HALF_4) == "ApplyChannelsLast<half,4>"

"""The CUDA core's kernels as the compiler made them, read without a GPU.

Reads what nvcc left beside each object of the CUDA test's build (`make gpu-code-check` builds
them with `-Xptxas -v --keep`): ptxas's report (<object>.ptxas.txt) and the PTX of every virtual
architecture (<object>.keep/*.ptx). Prints each kernel's registers and spills per architecture,
and fails where:
  - any kernel spills registers to local memory (on any architecture);
  - a vectorized sweep (the gradient's Sum*/Apply*, the forward's Moments*/Normalize*; vector
    width V > 1) stores anything narrower than 8 bytes other than as one vector instruction:
    these kernels store only x_backprop or y vectors and double partials, so a 4- or 2-byte
    store is a vector split up;
  - such a sweep of a 16-bit type loads a 16-bit scalar (its per-channel inputs are float and
    double), or loads no vector at all.
The load and store widths are read from the PTX, where nvcc decides them (ptxas keeps a PTX
vector access one instruction); registers and spills from ptxas, which decides those.

Usage: python tools/gpu_code_check.py "ARCHS" OBJECT...   (ARCHS: "75 80 86 89 90")
"""

from __future__ import annotations

import collections
import re
import sys
from pathlib import Path

ENTRY = re.compile(r"^(?:\.visible |\.weak )?\.entry (\S+)\(", re.M)
PTXAS_ENTRY = re.compile(r"Compiling entry function '(\S+)' for '(sm_\d+)'")
PTXAS_USAGE = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
PTXAS_REGISTERS = re.compile(r"Used (\d+) registers")
ACCESS = re.compile(r"\b(ld|st)\.global((?:\.[a-z]+)*)\.(v[24]\.)?([a-z]+\d+)\b")
SWEEP = re.compile(r"(?:Sum|Apply|Moments|Normalize)Channels(?:Last|First)"
                   r"I(?P<type>f|NS_4Half|NS_8BFloat16)E?Li(?P<width>\d+)E")

Usage = collections.namedtuple("Usage", "registers stack spill_stores spill_loads")


def short_name(mangled: str) -> str:
    """The kernel's name and template arguments, readable enough for a table."""
    match = re.search(r"(\d+)([A-Z][A-Za-z]+)I(.*?)EEvN", mangled)
    if not match:
        return mangled
    args = match.group(3)
    args = args.replace("NS_4HalfE", "half").replace("NS_8BFloat16E", "bfloat16")
    args = re.sub(r"^f", "float", args)
    args = re.sub(r"Li(\d+)E", r",\1", args).replace("Lb0E", ",train").replace("Lb1E", ",infer")
    return f"{match.group(2)}<{args.rstrip('E')}>"


def read_build(obj: Path):
    """ptxas's usage per (kernel, arch) and the PTX text per virtual architecture, as nvcc
    left them beside one object."""
    report = obj.with_suffix(".ptxas.txt")
    keep = obj.with_suffix(".keep")
    if not report.is_file() or not keep.is_dir():
        sys.exit(f"{obj}: no ptxas report or PTX beside it (build it with make gpu-code-check)")
    usage, entry = {}, None
    for line in report.read_text().splitlines():
        if (m := PTXAS_ENTRY.search(line)):
            entry = (m.group(1), m.group(2))
            usage[entry] = Usage(0, 0, 0, 0)
        elif entry and (m := PTXAS_USAGE.search(line)):
            usage[entry] = usage[entry]._replace(
                stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        elif entry and (m := PTXAS_REGISTERS.search(line)):
            usage[entry] = usage[entry]._replace(registers=int(m.group(1)))
    ptx = {path.name: path.read_text() for path in keep.glob("*.ptx")}
    if not usage or not ptx:
        sys.exit(f"{obj}: ptxas reported no kernel, or nvcc kept no PTX")
    return usage, ptx


def kernels_of(ptx: str):
    """(mangled name, body) of each kernel in a PTX file."""
    starts = [(m.start(), m.group(1)) for m in ENTRY.finditer(ptx)]
    for i, (start, name) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(ptx)
        yield name, ptx[start:end]


def sweep_problems(name: str, body: str) -> list[str]:
    """What is wrong with one vectorized sweep kernel's global accesses (see the module doc)."""
    match = SWEEP.search(name)
    if not match or int(match.group("width")) == 1:
        return []
    sixteen_bit = match.group("type") != "f"
    problems = []
    vector_loads = 0
    for kind, _, vector, type_ in ACCESS.findall(body):
        bits = int(re.sub(r"\D", "", type_))
        if kind == "st" and not vector and bits < 64:
            problems.append(f"a {bits}-bit scalar store (st.global.{type_})")
        if kind == "ld" and vector:
            vector_loads += 1
        if kind == "ld" and not vector and sixteen_bit and bits == 16:
            problems.append(f"a 16-bit scalar load (ld.global.{type_})")
    if vector_loads == 0:
        problems.append("no vector load")
    return sorted(set(problems))


def main() -> int:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    archs, objects = sys.argv[1].split(), [Path(o) for o in sys.argv[2:]]
    failures = []
    for obj in objects:
        usage, ptx_files = read_build(obj)
        print(f"{obj}: {len({k for k, _ in usage})} kernels, sm_{', sm_'.join(archs)}")
        print(f"  {'kernel':<44} {'registers (per arch)':<26} spills")
        for kernel in sorted({k for k, _ in usage}, key=short_name):
            per_arch = [usage.get((kernel, f"sm_{a}")) for a in archs]
            spills = sum(u.spill_stores + u.spill_loads for u in per_arch if u)
            registers = " ".join(str(u.registers) if u else "-" for u in per_arch)
            print(f"  {short_name(kernel):<44} {registers:<26} {spills}")
            if spills:
                failures.append(f"{short_name(kernel)} spills ({spills} bytes in all)")
            if None in per_arch:
                failures.append(f"{short_name(kernel)}: no ptxas report for every architecture")
        for ptx_name, ptx in sorted(ptx_files.items()):
            for kernel, body in kernels_of(ptx):
                for problem in sweep_problems(kernel, body):
                    failures.append(f"{short_name(kernel)} ({ptx_name}): {problem}")
    for failure in failures:
        print(f"FAIL: {failure}")
    print(f"gpu_code_check: {len(failures)} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

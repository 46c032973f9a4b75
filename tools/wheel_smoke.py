"""`make wheel-smoke`: a built wheel, installed the way a user would, used from outside the
checkout.

In a new virtual environment (this interpreter's `venv`, nothing upgraded): TensorFlow as given,
then the wheel with a plain `pip install` (no compiler involved, and no build step: pip must
install it as it is), from a scratch folder so nothing of the checkout is importable. Then:
- pip left the TensorFlow distribution alone (tensorflow-cpu is not swapped for tensorflow);
- `python -m tf_fbn_ops info` and `--version` work and report CUDA and the driver floor, and
  the self-check (`python -m tf_fbn_ops check`) passes;
- the CPU kernels match TensorFlow's ops (the TensorFlow-matrix smoke test, copied out);
- all three ops have GPU kernels registered, next to the CPU and XLA ones;
- the GPU code holds SASS for every architecture the build promises and PTX for the newest
  (cuobjdump, from NVIDIA's PyPI package);
- the C++ header ships, and the quick benchmark (ours against TensorFlow's op) runs from the
  installed package.
Exits non-zero on the first failure.

Usage: python tools/wheel_smoke.py WHEEL [--tensorflow tensorflow-cpu==2.21.0] [--cuda 12.4]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from build_support import cuda_toolkit  # noqa: E402

CUOBJDUMP = "nvidia-cuda-cuobjdump==13.2.51"
OPS = ("FbnFusedBatchNormGrad", "FbnFusedBatchNormGradV2", "FbnFusedBatchNormGradV3")
REGISTERED = """
import tensorflow as tf, tf_fbn_ops
from tensorflow.python.framework import kernels
tf_fbn_ops.load_library()
for op in {ops!r}:
    devices = sorted({{k.device_type for k in kernels.get_registered_kernels_for_op(op).kernel}})
    print(op, " ".join(devices))
print("GPU status:", tf_fbn_ops.gpu_kernel_status())
print("library:", tf_fbn_ops.library_path())
print("header:", tf_fbn_ops.get_include())
"""


def check(condition: bool, what: str) -> None:
    print(("ok   " if condition else "FAIL ") + what, flush=True)
    if not condition:
        raise SystemExit(1)


def run(command: list[str], cwd: Path, env: dict | None = None) -> str:
    print("$ " + " ".join(command), flush=True)
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    output = result.stdout + result.stderr
    if result.returncode != 0:
        print(output[-4000:])
        check(False, f"exit status 0 from {' '.join(command[:4])}")
    return output


def smoke(wheel: Path, tensorflow: str, cuda: str | None) -> None:
    expected_archs = [a.split(",code=")[1] for a in cuda_toolkit.arch_flags()]
    with tempfile.TemporaryDirectory(prefix="fbn-wheel-") as scratch_name:
        scratch = Path(scratch_name)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TF_FBN_OPS_LIBRARY")}
        env["TF_CPP_MIN_LOG_LEVEL"] = "2"
        python = str(scratch / "venv" / "bin" / "python")
        run([sys.executable, "-m", "venv", str(scratch / "venv")], scratch)
        pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        run([*pip, tensorflow], scratch, env)
        before = run([python, "-m", "pip", "list", "--format=freeze"], scratch, env)
        # --only-binary: pip must take the wheel as built, never fall back to building anything.
        run([*pip, "--only-binary=:all:", str(wheel)], scratch, env)
        after = run([python, "-m", "pip", "list", "--format=freeze"], scratch, env)
        tf_dists = lambda text: sorted(l for l in text.splitlines()
                                       if l.lower().startswith(("tensorflow==", "tensorflow-cpu==",
                                                                "tensorflow_cpu==")))
        check(tf_dists(before) == tf_dists(after),
              f"TensorFlow left as installed ({', '.join(tf_dists(after))})")

        info = run([python, "-m", "tf_fbn_ops", "info"], scratch, env)
        print(info)
        check("loads: yes" in info, "`python -m tf_fbn_ops info` loads the library")
        check("CUDA" in info and "or newer" in info, "info names the CUDA build and driver floor")
        if cuda:
            floor = cuda_toolkit.minimum_driver(cuda)
            check(f"CUDA {cuda} (NVIDIA driver {floor} or newer)" in info,
                  f"built with CUDA {cuda}: driver floor {floor}")
        version = run([python, "-m", "tf_fbn_ops", "--version"], scratch, env)
        check("library built for TensorFlow" in version, f"--version: {version.strip()}")
        # TensorFlow 2.20 and later ship XLA's FFI headers: the wheel's ops compile to custom calls.
        ffi_expected = "XLA_FFI = True" in (ROOT / "tf_fbn_ops" / "_build_info.py").read_text()
        if ffi_expected:
            check("custom calls of the kernels" in " ".join(version.split()),
                  "under XLA the ops compile to custom calls of the kernels")

        checked = run([python, "-m", "tf_fbn_ops", "check"], scratch, env)
        summary = next((l for l in checked.splitlines() if l.startswith("check: ")), "no summary")
        check(summary.endswith(" passed, 0 failed"), f"`python -m tf_fbn_ops check`: {summary}")

        shutil.copy(ROOT / "tools" / "tf_matrix_smoke.py", scratch / "smoke.py")
        parity = run([python, "smoke.py"], scratch, env).splitlines()
        for name in ("SMOKE", "XLA"):
            line = next((l for l in parity if l.startswith(name + " ")), f"{name} missing")
            if line == "XLA none":  # a TensorFlow whose wheel lacks what the lowerings need
                check("no XLA lowerings" in version, "no XLA lowerings, as the build says")
                continue
            passed, _, total = line.split()[1].partition("/")
            check(passed == total != "", f"parity against TensorFlow's ops: {line}")

        registered = run([python, "-c", REGISTERED.format(ops=OPS)], scratch, env)
        print(registered)
        for op in OPS:
            line = next(l for l in registered.splitlines() if l.startswith(op + " "))
            check("GPU" in line.split() and "CPU" in line.split(), f"{op}: CPU and GPU kernels")
        library = Path(next(l for l in registered.splitlines()
                            if l.startswith("library:")).split(": ", 1)[1])
        check(str(ROOT) not in str(library), f"library imported from the install: {library}")
        header = Path(next(l for l in registered.splitlines()
                           if l.startswith("header:")).split(": ", 1)[1])
        check((header / "tf_fbn_ops" / "ops.h").is_file(), "C++ graph-API header installed")

        bench = run([python, "-m", "tf_fbn_ops", "bench", "--quick", "--rounds", "1"], scratch,
                    env)
        check(sum(line.startswith("8x14x14x128") for line in bench.splitlines()) == 4,
              "`bench --quick` runs from the installed package")

        run([*pip, "--no-deps", "--target", str(scratch / "cuobjdump"), CUOBJDUMP], scratch, env)
        cuobjdump = next((scratch / "cuobjdump").rglob("bin/cuobjdump"))
        elf = run([str(cuobjdump), "--list-elf", str(library)], scratch, env)
        ptx = run([str(cuobjdump), "--list-ptx", str(library)], scratch, env)
        for arch in expected_archs:  # cuobjdump names both by SM: _fbn_ops.1.sm_90.ptx
            kind, listing, suffix = (("PTX", ptx, "ptx") if arch.startswith("compute_")
                                     else ("SASS", elf, "cubin"))
            sm = "sm_" + arch.split("_")[1]
            check(f".{sm}.{suffix}" in listing, f"GPU code for {arch} ({kind})")
    names = zipfile.ZipFile(wheel).namelist()
    check(any(n.endswith("tf_fbn_ops/_fbn_ops.so") for n in names), "wheel holds the library")
    check(not any("/tests/" in n or n.startswith("build_support/") for n in names),
          "no tests or build tools in the wheel")
    shipped = {n for n in names if n.endswith(".py")}
    sources = set(subprocess.run(["git", "ls-files", "tf_fbn_ops/*.py", "tf_fbn_ops/**/*.py"],
                                 cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout.split())
    stale = sorted(shipped - sources - {"tf_fbn_ops/_build_info.py"})  # written by the build
    check(not stale, "only the package's own modules in the wheel"
                     + (f" (stale: {', '.join(stale)})" if stale else ""))
    print(f"wheel: {len(names)} files, {wheel.stat().st_size / 2**20:.1f} MiB")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path)
    parser.add_argument("--tensorflow", default="tensorflow-cpu==2.21.0",
                        help="the TensorFlow requirement to install first")
    parser.add_argument("--cuda", help="the CUDA release the wheel must be built with (12.4)")
    args = parser.parse_args(argv)
    smoke(args.wheel.resolve(), args.tensorflow, args.cuda)
    print("wheel smoke test: 1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""`make tf-matrix`: builds the library against every TensorFlow minor from 2.12 to 2.21 and runs
the parity smoke test (tools/tf_matrix_smoke.py) against that version's tf.raw_ops.

Each version gets a throwaway virtual environment with `tensorflow-cpu==2.N.*` for this Python
(3.11) and its own build directory, so objects compiled against one version's headers are never
reused for another. CPU builds (TF_FBN_OPS_CUDA=0): the CUDA core does not depend on the
TensorFlow version. Prints a table and writes it to build/tf-matrix/results.md.

With --wheels (`make wheels`), each version's environment builds a binary wheel instead
(tools/build_wheel.py: CUDA, XLA, auditwheel) into dist/, and tools/wheel_smoke.py installs it
into a new environment with that TensorFlow and checks it from outside the checkout.

Usage: python tools/tf_matrix.py [--wheels] [2.12 2.13 ...]
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "build" / "tf-matrix"
VERSIONS = [f"2.{minor}" for minor in range(12, 22)]


def run(command: list[str], log: Path, **kwargs) -> bool:
    with open(log, "a") as out:
        out.write("$ " + " ".join(command) + "\n")
        out.flush()
        return subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, **kwargs).returncode == 0


def one_version(version: str) -> dict:
    home = WORK / version
    python = home / "venv" / "bin" / "python"
    # An environment that finished installing before is reused; everything else is rebuilt.
    reuse = (home / "venv" / ".installed").exists()
    for stale in ([home] if not reuse else [home / "lib", home / "temp", home / "log.txt"]):
        shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink(True)
    home.mkdir(parents=True, exist_ok=True)
    log = home / "log.txt"
    row = {"version": version, "tf": "-", "build": "no", "tests": "-", "xla": "-",
           "xla_path": "-", "build_s": "-"}
    if not reuse and not (run([sys.executable, "-m", "venv", str(home / "venv")], log) and
            run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip", "setuptools>=64",
                 "wheel"], log) and
            run([str(python), "-m", "pip", "install", "-q", f"tensorflow-cpu=={version}.*"], log)):
        row["build"] = "no TF wheel"
        return row
    (home / "venv" / ".installed").touch()
    row["tf"] = subprocess.run([str(python), "-c", "import tensorflow as tf; print(tf.__version__)"],
                               capture_output=True, text=True,
                               env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")).stdout.strip()
    if WHEELS:
        return one_wheel(python, row, log)
    env = dict(os.environ, TF_FBN_OPS_CUDA="0")
    start = time.time()
    built = run([str(python), "setup.py", "-q", "build_py", "--build-lib", str(home / "lib"),
                 "build_ext", "--build-lib", str(home / "lib"), "--build-temp",
                 str(home / "temp")], log, cwd=ROOT, env=env)
    row["build_s"] = f"{time.time() - start:.0f}"
    if not built:
        return row
    row["build"] = "ok"
    smoke = subprocess.run([str(python), str(ROOT / "tools" / "tf_matrix_smoke.py")],
                           capture_output=True, text=True, cwd=home / "lib",
                           env=dict(os.environ, PYTHONPATH=str(home / "lib")))
    with open(log, "a") as out:
        out.write(smoke.stdout + smoke.stderr)
    lines = [l for l in smoke.stdout.splitlines() if l.startswith("SMOKE")]
    row["tests"] = lines[-1].split()[1] if lines else "crashed"
    xla = [l for l in smoke.stdout.splitlines() if l.startswith("XLA ")]
    row["xla"] = xla[-1].split()[1] if xla else "crashed"
    built_without = [l for l in log.read_text().splitlines() if "XLA lowerings not built" in l]
    if row["xla"] == "none" and built_without:
        row["xla"] = "not built: " + built_without[-1].split("not built: ", 1)[1]
    # What the op compiled to in the smoke test, and what setup.py said it would.
    compiled = [l for l in smoke.stdout.splitlines() if l.startswith("XLA_PATH ")]
    said = [l for l in log.read_text().splitlines() if "under XLA the ops compile to" in l]
    if compiled:
        row["xla_path"] = compiled[-1].split(" ", 1)[1]
        if said and ("custom calls" in said[-1]) != ("custom calls" in row["xla_path"]):
            row["xla_path"] += f" (MISMATCH: the build said {said[-1].split('compile to ', 1)[1]})"
    return row


def one_wheel(python: Path, row: dict, log: Path) -> dict:
    """Builds this environment's wheel into dist/ and smoke-tests it in a new environment."""
    start = time.time()
    built = run([str(python), str(ROOT / "tools" / "build_wheel.py"), "--out",
                 str(ROOT / "dist")], log, cwd=ROOT)
    row["build_s"] = f"{time.time() - start:.0f}"
    wheels = [l for l in log.read_text().splitlines() if l.startswith("wheel: ")]
    if not built or not wheels:
        return row
    row["build"] = wheels[-1].split()[3]  # the platform tag
    smoke = run([sys.executable, str(ROOT / "tools" / "wheel_smoke.py"), wheels[-1].split()[1],
                 "--tensorflow", f"tensorflow-cpu=={row['tf']}", "--cuda", "12.4"], log, cwd=ROOT)
    row["tests"] = "wheel smoke passed" if smoke else "wheel smoke FAILED"
    row["xla"] = "-"
    return row


def main(versions: list[str]) -> int:
    WORK.mkdir(parents=True, exist_ok=True)
    rows = []
    header = ("| TensorFlow | installed | build | smoke tests passed | XLA (jit_compile) smoke "
              "tests passed | under XLA the ops compile to | build time (s) |")
    print(header, flush=True)
    for version in versions:
        row = one_version(version)
        rows.append(row)
        print(_table_row(row), flush=True)
    table = [header, "|---|---|---|---|---|---|---|"] + [_table_row(r) for r in rows]
    (WORK / "results.md").write_text("\n".join(table) + "\n")
    # A TensorFlow without what the lowerings need is reported, not failed; broken ones fail.
    if WHEELS:
        return 0 if all(r["tests"] == "wheel smoke passed" for r in rows) else 1
    ok = all(r["build"] == "ok" and _all_passed(r["tests"])
             and (_all_passed(r["xla"]) or r["xla"].startswith("not built"))
             and "MISMATCH" not in r["xla_path"]
             for r in rows)
    return 0 if ok else 1


def _table_row(row: dict) -> str:
    return (f"| {row['version']} | {row['tf']} | {row['build']} | {row['tests']} | "
            f"{row['xla']} | {row['xla_path']} | {row['build_s']} |")


def _all_passed(cell: str) -> bool:
    """A "passed/total" cell with nothing failed."""
    parts = cell.split("/")
    return len(parts) == 2 and parts[0] == parts[1]


WHEELS = "--wheels" in sys.argv[1:]

if __name__ == "__main__":
    chosen = [a for a in sys.argv[1:] if a != "--wheels"]
    sys.exit(main(chosen or VERSIONS))

"""Keeps the linked library loadable on the oldest glibc the TensorFlow wheel itself supports.

Linking on a new glibc binds every C library call to its newest symbol version: on glibc 2.34
and later, pthread_create, dlopen, sem_init and their kin (most referenced by the static CUDA
runtime) moved from libpthread, libdl and librt into libc and gained version GLIBC_2.34, so a
library linked here would not load where TensorFlow's manylinux_2_27 wheel does. glibc still
exports each of them under its old version. Stub libraries named after their old homes
(libpthread.so.0, libdl.so.2, librt.so.1) that define exactly the too-new symbols, each at the
newest version at or below the floor, make the linker record those old versions instead; at run
time the loader finds them in those libraries (old glibc) or in libc (new glibc, as compat
symbols), matching by version name. Checked by loading such a library under glibc 2.31. The same idea as zig's or a sysroot's glibc stubs, for the few symbols we need.

libstdc++ is handled by linker wrapping, not stubs: see cc/runtime/libstdcxx_floor.cc.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from build_support import target_tensorflow, versioning

# Where glibc before 2.34 keeps the functions that 2.34 moved into libc. A stub library with
# the old home's name (not libc.so.6: the linker would then drop the real libc as a duplicate)
# makes the library need each function, at its old version, from that home. The homes become
# dependencies of the library itself, so it never relies on another library having loaded them
# (checked on glibc 2.31: without libpthread in scope, pthread_create@GLIBC_2.2.5 is undefined);
# glibc 2.34 and later still ship them, as empty libraries that define the old versions, and
# resolve each function to libc's copy of that version.
OLD_HOMES_BY_PREFIX = {
    "libpthread.so.0": ("pthread_", "sem_", "__pthread_"),
    "libdl.so.2": ("__libdl_",),
    "librt.so.1": ("shm_", "timer_", "mq_", "aio_", "lio_"),
    "libanl.so.1": ("gai_",),
    "libutil.so.1": ("openpty", "forkpty", "login", "logout", "logwtmp"),
}
OLD_HOMES_BY_NAME = {
    "libdl.so.2": ("dlopen", "dlclose", "dlsym", "dlvsym", "dlerror", "dlmopen", "dladdr",
                   "dladdr1", "dlinfo"),
    "libanl.so.1": ("getaddrinfo_a",),
}
# g++ 12's headers reference these libstdc++ symbols, which are newer than manylinux_2_27
# allows (GLIBCXX_3.4.24); the library defines them itself (cc/runtime/libstdcxx_floor.cc) and
# the linker sends every reference there.
WRAPPED_LIBSTDCXX = ("_ZSt28__throw_bad_array_new_lengthv",
                     "_ZNSt7__cxx1118basic_stringstreamIcSt11char_traitsIcESaIcEEC1Ev")
# objdump -T: "...  DF *UND*  0000000000000000 (GLIBC_2.34) pthread_create" for an import,
# "... g    DF .text  00000000000000a4 (GLIBC_2.2.5) pthread_create" (hidden, compat) or
# "...  GLIBC_2.34  pthread_create" (default) for a definition.
_DYNAMIC_SYMBOL = re.compile(r"\s(\*UND\*|\.\S+)\s+[0-9a-f]+\s+(?:Base\s+)?\(?([A-Z]+_[\d.]+)\)?\s+(\S+)$")


# Platform tags older than PEP 600's manylinux_X_Y names.
LEGACY_MANYLINUX = {"manylinux2014": "2.17", "manylinux2010": "2.12", "manylinux1": "2.5"}


def objdump() -> str:
    """The objdump that reads the library: OBJDUMP (a cross build's, e.g.
    aarch64-linux-gnu-objdump), else the system's."""
    return os.environ.get("OBJDUMP") or "objdump"


def tensorflow_wheel_floor() -> str | None:
    """The glibc version in the platform tag of the installed TensorFlow wheel (or of a cross
    build's target), e.g. "2.27"."""
    target = target_tensorflow.description()
    if target:
        tags = list(target["wheel_tags"])
    else:
        dist = versioning.installed_tensorflow()
        tags = re.findall(r"^Tag: (\S+)$", (dist.read_text("WHEEL") or "") if dist else "", re.M)
    for tag in (t.split("-")[-1] for t in tags):
        found = re.match(r"manylinux_(\d+)_(\d+)_", tag)
        if found:
            return f"{found.group(1)}.{found.group(2)}"
        for legacy, version in LEGACY_MANYLINUX.items():
            if tag.startswith(legacy):
                return version
    return None


def link_within_floor(link: Callable[[list[str]], None], library: Path, floor: str,
                      required: bool, cc: list[str], folder: Path) -> None:
    """Links `library` with link(extra_inputs), then, if it imports anything newer than the
    floor, again with stub libraries for those imports. A floor that cannot be met is an error
    when required; otherwise it is said and the library is linked for this system alone."""
    link([])
    too_new = too_new_imports(library, floor)
    if not too_new:
        return
    try:
        stubs = write_stubs(too_new, system_library(cc, "libc.so.6"), floor, folder, cc)
        link(["-Wl,--push-state,--no-as-needed", *map(str, stubs), "-Wl,--pop-state"])
        left = too_new_imports(library, floor)
        if left:
            raise RuntimeError(f"still needed: {left}")
    except (RuntimeError, subprocess.CalledProcessError) as e:
        if required:
            raise
        print(f"tf-fbn-ops: the library needs a newer glibc than {floor} ({e}); it runs here but "
              "not on every system TensorFlow does", file=sys.stderr)
        link([])


def version_tuple(version: str) -> tuple[int, ...]:
    """"GLIBC_2.3.4" or "2.3.4" -> (2, 3, 4)."""
    return tuple(int(p) for p in version.rsplit("_", 1)[-1].split("."))


def dynamic_symbols(library: Path) -> list[tuple[bool, str, str]]:
    """(is_import, version, name) of every versioned dynamic symbol of `library`."""
    out = subprocess.run([objdump(), "-T", str(library)], capture_output=True, text=True,
                         check=True).stdout
    found = []
    for line in out.splitlines():
        match = _DYNAMIC_SYMBOL.search(line)
        if match:
            found.append((match.group(1) == "*UND*", match.group(2), match.group(3)))
    return found


def too_new_imports(library: Path, floor: str, prefix: str = "GLIBC") -> dict[str, str]:
    """{symbol: version} of the imports whose `prefix` version is newer than `floor`."""
    return {name: version for is_import, version, name in dynamic_symbols(library)
            if is_import and version.startswith(prefix + "_")
            and version_tuple(version) > version_tuple(floor)}


def highest_version(library: Path, prefix: str) -> str | None:
    """The newest `prefix` (GLIBC, GLIBCXX, CXXABI) version that `library` imports."""
    versions = [v for is_import, v, _ in dynamic_symbols(library)
                if is_import and v.startswith(prefix + "_")]
    return max(versions, key=version_tuple) if versions else None


def old_home(symbol: str) -> str | None:
    """The library an old glibc keeps `symbol` in, for the functions glibc 2.34 moved into libc."""
    for soname, prefixes in OLD_HOMES_BY_PREFIX.items():
        if symbol in OLD_HOMES_BY_NAME.get(soname, ()) or symbol.startswith(prefixes):
            return soname
    return None


def write_stubs(imports: dict[str, str], system_libc: Path, floor: str, folder: Path,
                cc: list[str]) -> list[Path]:
    """Builds one stub library per old home (libpthread.so.0, ...) in `folder`, defining each
    import at its newest version <= floor as glibc's libc still exports it."""
    defined: dict[str, list[str]] = {}
    for is_import, version, name in dynamic_symbols(system_libc):
        if not is_import and name in imports:
            defined.setdefault(name, []).append(version)
    homes: dict[str, dict[str, list[str]]] = {}
    for name in sorted(imports):
        old = [v for v in defined.get(name, []) if version_tuple(v) <= version_tuple(floor)]
        home = old_home(name)
        if not old or home is None:
            raise RuntimeError(
                f"{name} needs {imports[name]}, and no older version of it is known (in "
                f"{system_libc} or a library glibc merged into it): the library cannot be made "
                f"to load on glibc {floor}")
        homes.setdefault(home, {}).setdefault(max(old, key=version_tuple), []).append(name)
    folder.mkdir(parents=True, exist_ok=True)
    stubs = []
    for soname, nodes in sorted(homes.items()):
        base = folder / soname.split(".so")[0]
        base.with_suffix(".c").write_text(
            "/* Generated: functions with their old glibc versions, for linking only. */\n"
            + "".join(f"void {name}(void) {{}}\n" for names in nodes.values() for name in names))
        base.with_suffix(".map").write_text("".join(
            f"{version} {{ global: {' '.join(f'{n};' for n in names)} }};\n"
            for version, names in sorted(nodes.items(), key=lambda item: version_tuple(item[0]))))
        stub = folder / soname
        subprocess.run([*cc, "-x", "c", "-shared", "-fPIC", "-nostdlib", str(base.with_suffix(".c")),
                        f"-Wl,--version-script={base.with_suffix('.map')}", f"-Wl,-soname,{soname}",
                        "-o", str(stub)], check=True)
        stubs.append(stub)
    return stubs


def system_library(cc: list[str], soname: str) -> Path:
    """The file the compiler's linker would use for `soname`."""
    out = subprocess.run([*cc, f"-print-file-name={soname}"], capture_output=True, text=True,
                         check=True).stdout.strip()
    return Path(out).resolve()

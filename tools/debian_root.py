"""A Debian root made by debootstrap, of this machine's architecture or another one (arm64 runs
under qemu's user-mode emulation through binfmt_misc), and commands run inside it.

The platform test checks wheels there (Debian 13's CPython 3.13; TensorFlow's AArch64 wheel),
and the AArch64 wheel build reads its target TensorFlow's tf.sysconfig there. A root is made
once and kept in build/platform/NAME; making it needs root, network access to Debian's archive,
and, for another architecture, qemu-user-static (installed with apt where missing).
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "build" / "platform"
MIRROR = "http://deb.debian.org/debian"
PACKAGES = "python3,python3-venv,python3-pip,ca-certificates"
# Debian's name for this machine's architecture.
NATIVE = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
# binfmt_misc's entry for an architecture's executables, as qemu-user-static ships it.
BINFMT = {"arm64": "qemu-aarch64"}
# A bounded wait for a command inside a root: emulated pip installs of TensorFlow take minutes.
INSIDE_TIMEOUT_S = 3600


class RootError(Exception):
    pass


def run(command: list[str], log, timeout: float | None = None, **kwargs) -> None:
    log.write("$ " + " ".join(command) + "\n")
    log.flush()
    try:
        result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=timeout,
                                **kwargs)
    except subprocess.TimeoutExpired:
        raise RootError(f"over {timeout:.0f} s: {' '.join(command)}") from None
    if result.returncode != 0:
        raise RootError(f"exit {result.returncode}: {' '.join(command)}")


class DebianRoot:
    """build/platform/NAME: Debian SUITE for ARCH."""

    def __init__(self, name: str, suite: str, arch: str = NATIVE):
        self.path = WORK / name
        self.suite, self.arch = suite, arch

    def ensure(self, log) -> float:
        """Makes the root unless it exists; returns the seconds that took (0 when cached)."""
        if os.geteuid() != 0:
            raise RootError(f"a {self.suite} {self.arch} root needs root (debootstrap, chroot)")
        if (self.path / "usr" / "bin" / "python3").exists():
            self._enable_emulation(log)
            return 0.0
        start = time.time()
        if self.foreign and self.arch not in BINFMT:
            raise RootError(f"no emulator known for {self.arch}")
        needed = {"debootstrap": "debootstrap"}  # package: a program it installs
        if self.foreign:
            needed["qemu-user-static"] = f"{BINFMT[self.arch]}-static"
        missing = [package for package, program in needed.items() if shutil.which(program) is None]
        if missing:
            run(["apt-get", "install", "-y", "-q", *missing], log)
        self._enable_emulation(log)
        partial = self.path.with_name(self.path.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        run(["debootstrap", f"--arch={self.arch}", "--variant=minbase", f"--include={PACKAGES}",
             self.suite, str(partial), MIRROR], log)
        partial.rename(self.path)
        return time.time() - start

    @property
    def foreign(self) -> bool:
        return self.arch != NATIVE

    def _enable_emulation(self, log) -> None:
        """Registers qemu with binfmt_misc (mounting it where a container has not), with the
        flag that lets the kernel find the emulator from inside the chroot."""
        if not self.foreign:
            return
        entry = BINFMT[self.arch]
        binfmt = Path("/proc/sys/fs/binfmt_misc")
        if not (binfmt / "register").exists():
            run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(binfmt)], log)
        if (binfmt / entry).exists():
            return
        conf = Path(f"/usr/lib/binfmt.d/{entry}.conf")
        if not conf.exists():
            run(["apt-get", "install", "-y", "-q", "qemu-user-static"], log)
        (binfmt / "register").write_text(conf.read_text().strip() + "\n")

    @contextlib.contextmanager
    def mounted(self, log) -> Iterator[None]:
        """/proc inside the root, the host's resolver and certificate bundle (with a proxy's CA,
        where there is one) as its own: pip reads the system's store. /dev is the root's own
        (debootstrap made its nodes): a bind mount of the host's would survive a killed run, and
        deleting the root (make clean) would then delete the host's devices."""
        shutil.copy("/etc/resolv.conf", self.path / "etc" / "resolv.conf")
        bundle = self.path / "etc" / "ssl" / "certs" / "ca-certificates.crt"
        bundle.unlink(missing_ok=True)
        shutil.copy("/etc/ssl/certs/ca-certificates.crt", bundle)
        proc = self.path / "proc"
        run(["mount", "-t", "proc", "proc", str(proc)], log)
        try:
            yield
        finally:
            run(["umount", str(proc)], log)

    def inside(self, script: str, log, timeout: float = INSIDE_TIMEOUT_S, **kwargs) -> None:
        """Runs a shell script in the root (within mounted()), with a clean environment."""
        run(["chroot", str(self.path), "/usr/bin/env", "-i", "HOME=/root",
             "PATH=/usr/local/bin:/usr/bin:/bin", "PIP_DISABLE_PIP_VERSION_CHECK=1",
             "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
             "PIP_CERT=/etc/ssl/certs/ca-certificates.crt", "/bin/sh", "-c", script],
            log, timeout=timeout, **kwargs)

    def host_path(self, inside_path: str) -> Path:
        """Where a path of the root lies on this machine."""
        return self.path / inside_path.lstrip("/")

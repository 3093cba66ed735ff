"""The commands ``pip install`` puts on PATH (``[project.scripts]`` in ``pyproject.toml``).

``analyzer`` is the Rust command line itself, compiled into the extension module (``shardscope._native``), so the
package carries one build of the analyzer for both the library and the command.

``capture`` and ``viewer`` are the workspace's own binaries, built with the wheel (``python/build.rs``) into the
package's ``_bin/`` folder beside the capture's injection library and NCCL profiler plugin, which it loads from
beside its binary; their commands replace the Python process with the binary (same arguments, output, signals
and exit status).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

#: Where the wheel carries the bundled binaries and libraries.
BIN = Path(__file__).with_name("_bin")
_EXE_SUFFIX = ".exe" if os.name == "nt" else ""


def analyzer() -> None:
    """``analyzer ARGS``: the same command as the ``analyzer`` binary, same output and exit status."""
    # Python turns Ctrl-C into an exception it raises only once the Rust code returns; the binary stops at once.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    from . import _native

    sys.exit(_native.run_analyzer(sys.argv))


def capture() -> None:
    """``capture ARGS``: the bundled ``capture`` binary, with its injection library and NCCL plugin beside it."""
    _run_bundled("capture", "libshardscope_inject.so", "libshardscope_nccl_profiler.so")


def viewer() -> None:
    """``viewer ARGS``: the bundled ``viewer`` binary."""
    _run_bundled("viewer" + _EXE_SUFFIX)


def _run_bundled(binary: str, *libraries: str) -> None:
    """Runs ``_bin/<binary>`` in place of this process, once it and the libraries it loads are there; else one line
    naming the missing file, and exit status 2."""
    name = binary.removesuffix(_EXE_SUFFIX) if _EXE_SUFFIX else binary
    for file in (binary, *libraries):
        if not (BIN / file).is_file():
            sys.stderr.write(f"{name}: {BIN / file}: missing from the installed shardscope package "
                             "(`pip install ./python` builds it; capture on Linux only)\n")
            sys.exit(2)
    argv = [sys.argv[0], *sys.argv[1:]]
    try:
        if os.name == "nt":
            # Windows has no exec that keeps the process: wait for the binary and pass its status on.
            sys.exit(subprocess.call([str(BIN / binary), *argv[1:]]))
        os.execv(BIN / binary, argv)
    except OSError as error:
        sys.stderr.write(f"{name}: {BIN / binary}: {error.strerror or error}\n")
        sys.exit(2)

"""The commands ``pip install`` puts on PATH (``[project.scripts]`` in ``pyproject.toml``).

``analyzer`` is the Rust command line itself, compiled into the extension module (``shardscope._native``), so the
package carries one build of the analyzer for both the library and the command.
"""

from __future__ import annotations

import signal
import sys


def analyzer() -> None:
    """``analyzer ARGS``: the same command as the ``analyzer`` binary, same output and exit status."""
    # Python turns Ctrl-C into an exception it raises only once the Rust code returns; the binary stops at once.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    from . import _native

    sys.exit(_native.run_analyzer(sys.argv))

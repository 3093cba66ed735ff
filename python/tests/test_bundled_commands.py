"""`capture` and `viewer` on PATH after `pip install`: the workspace's binaries carried in the wheel (`_bin/`,
built by `python/build.rs`), run in place of the console script, and the capture finding its injection library
and NCCL profiler plugin beside its binary in the package."""

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from shardscope import _commands

#: The console scripts installed beside this interpreter.
SCRIPTS = Path(sys.executable).parent

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="capture is built on Linux only")


def run(command, *args, **kwargs):
    return subprocess.run([str(SCRIPTS / command), *args], capture_output=True, text=True, **kwargs)


@pytest.mark.parametrize("command", ["capture", "viewer"])
def test_the_command_is_on_path_and_is_the_binary(command):
    assert (SCRIPTS / command).is_file(), f"pip install put no {command} beside {sys.executable}"
    assert (_commands.BIN / command).is_file(), f"the wheel carries no {_commands.BIN / command}"
    result = run(command, "--version")
    assert result.returncode == 0, result.stderr
    # clap's `NAME VERSION`: the workspace's version, which is the package's.
    assert result.stdout.rstrip().endswith(f" {version('shardscope')}"), result.stdout
    result = run(command, "--help")
    assert result.returncode == 0, result.stderr
    assert "Usage: " in result.stdout and command in result.stdout


def test_bad_options_exit_as_the_binary_does():
    # clap's status for an option it does not know: the binary's, passed through the console script.
    result = run("viewer", "--no-such-option")
    assert result.returncode == 2
    assert "--no-such-option" in result.stderr


def test_the_capture_finds_its_libraries_beside_it(tmp_path):
    # A workload that never touches CUDA, printing what capture handed it: the injection library (CUDA's injection
    # path and the preload) and the NCCL plugin, each of them the package's copy.
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", "NCCL_PROFILER_PLUGIN", "CUDA_INJECTION64_PATH")}
    script = 'printf "%s\\n" "$CUDA_INJECTION64_PATH" "$LD_PRELOAD" "$NCCL_PROFILER_PLUGIN"'
    out = tmp_path / "out.sqlite"
    result = run("capture", "-o", str(out), "--group-wait", "1", "--", "sh", "-c", script, env=env)
    assert result.returncode == 0, result.stderr
    inject = str((_commands.BIN / "libshardscope_inject.so").resolve())
    plugin = str((_commands.BIN / "libshardscope_nccl_profiler.so").resolve())
    assert result.stdout.splitlines() == [inject, inject, plugin]
    assert out.is_file(), "capture wrote no trace"


def test_a_missing_binary_is_one_line_and_exit_2(tmp_path):
    # A copy of the package's command module beside an empty `_bin/`, as in a package whose build left it out.
    package = tmp_path / "broken"
    (package / "_bin").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "_commands.py").write_text(Path(_commands.__file__).read_text())
    for command in ("capture", "viewer"):
        code = f"import sys; sys.argv = ['{command}', '--help']; from broken._commands import {command}; {command}()"
        result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
        assert result.returncode == 2
        assert result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith(f"{command}: {package / '_bin' / command}: missing ")

"""What `pip install` brings besides the library: the `analyzer` command on PATH (the extension module's copy of the
CLI, the same output and exit status as the binary), `python -m shardscope.dask`, and the README's Python example."""

import os
import re
import subprocess
import sys
from pathlib import Path

import shardscope
from conftest import REPO

#: The `analyzer` console script installed beside this interpreter.
INSTALLED = Path(sys.executable).parent / "analyzer"


def run(*args):
    return subprocess.run([str(INSTALLED), *args], cwd=REPO, capture_output=True, text=True)


def test_the_installed_analyzer_is_the_binarys(cli):
    assert INSTALLED.is_file(), f"pip install put no analyzer beside {sys.executable}"
    sample = "sample-traces/tp2_skew_capture.sqlite.gz"
    result = run("report", "--format", "json", sample)
    assert result.returncode == 0, result.stderr
    assert result.stdout == cli("report", "--format", "json", sample)


def test_the_installed_analyzer_fails_as_the_binary_does():
    result = run("report", "no-such-file.sqlite")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "no-such-file.sqlite" in result.stderr
    assert run("--version").stdout.startswith("analyzer ")


def test_the_readme_python_example_runs(tmp_path):
    # The README links the page that holds the example (docs/python.md).
    readme = (REPO / "README.md").read_text()
    pages = [readme] + [(REPO / "docs" / name).read_text() for name in re.findall(r"\]\(docs/([\w-]+\.md)\)", readme)]
    blocks = [block for page in pages for block in re.findall(r"```python\n(.*?)```", page, re.S)]
    example = next(block for block in blocks if "import shardscope" in block)
    sample = str(REPO / "sample-traces/tp2_skew_capture.sqlite.gz")
    kernels = shardscope.load(sample).kernels().to_pandas()
    # The README's `(a, b)`: a window through the run.
    window = {"a": int(kernels.start_ns.min()), "b": int(kernels.end_ns.max())}
    exec(compile(example.replace("run.sqlite", sample), "README.md", "exec"), window)
    assert window["run"].report() == shardscope.report(sample)


def test_the_dask_module_without_dask_says_what_to_install(tmp_path):
    # A `distributed` that cannot be imported, as where the [dask] extra is not installed.
    (tmp_path / "distributed.py").write_text("raise ImportError('No module named distributed')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "shardscope.dask", "x.sqlite"], cwd=REPO, env=env,
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "pip install 'shardscope[dask]'" in result.stderr

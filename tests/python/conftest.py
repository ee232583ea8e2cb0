"""Shared fixtures for the lingbot_map tests (run by scripts/test.sh with Debian's python3 -m pytest).

The module is imported from the build tree (LINGBOT_BUILD_DIR, default build/); a missing build is
an error, never a skip. The CLI (LINGBOT_CLI_PATH, default build/lingbot-map) is the reference the
Python results must equal bit for bit.
"""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("LINGBOT_BUILD_DIR", ROOT / "build"))
sys.path.insert(0, str(BUILD / "python"))

try:
    import lingbot_map  # noqa: E402
except ImportError as error:  # the module was not built (or not for this interpreter)
    # Only tests marked `no_module` (test_docs.py: it reads the Markdown files) run without it. Every
    # other test fails with this error, never skips, and the files that import the module themselves
    # fail collection: the whole run still fails when the module was not built.
    lingbot_map = None
    MODULE_IMPORT_ERROR = error
else:
    MODULE_IMPORT_ERROR = None

TINY = ROOT / "testdata" / "tiny"
SHARED_GOLDEN = ROOT.parent / "shared" / "golden"
# docs/cli.md's golden `run` options for the tiny case, as CLI flags and as Python keywords.
TINY_CLI_OPTIONS = ["--image-size", "112", "--scale-frames", "2", "--kv-window", "3", "--keyframe-interval", "1"]
TINY_OPTIONS = dict(image_size=112, scale_frames=2, kv_window=3, keyframe_interval=1)


def pytest_configure(config):
    config.addinivalue_line("markers", "no_module: the test does not use the lingbot_map module (runs without a build)")


@pytest.fixture(autouse=True)
def _module_built(request):
    if MODULE_IMPORT_ERROR is not None and request.node.get_closest_marker("no_module") is None:
        pytest.fail(f"cannot import lingbot_map from {BUILD / 'python'}: {MODULE_IMPORT_ERROR}", pytrace=False)


@pytest.fixture(scope="session")
def cli() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("LINGBOT_CLI_PATH", BUILD / "lingbot-map"))
    assert path.is_file(), f"lingbot-map CLI not found at {path}: build it first (cmake --build build)"
    return path


@pytest.fixture(scope="session")
def tiny_model() -> "lingbot_map.Model":
    return lingbot_map.Model.load(TINY / "model.pt")


@pytest.fixture(scope="session")
def demo_model() -> "lingbot_map.Model":
    return lingbot_map.Model.demo()


def run_cli(cli: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(cli), *map(str, args)], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{cli} {' '.join(map(str, args))} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc

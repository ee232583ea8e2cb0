"""examples/python/ run end to end: the folder script writes run's files (the CLI's bytes, and Open3D
reads the cloud), the webcam script streams generated frames and stops cleanly on Ctrl-C."""
import filecmp
import json
import os
import signal
import subprocess
import sys

import pytest

from conftest import BUILD, ROOT, TINY, TINY_CLI_OPTIONS, run_cli

EXAMPLES = ROOT / "examples" / "python"
ENV = {**os.environ, "PYTHONPATH": str(BUILD / "python"), "OMP_NUM_THREADS": "2"}


def run_example(script: str, *args) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, str(EXAMPLES / script), *map(str, args)], capture_output=True, text=True,
                          env=ENV, stdin=subprocess.DEVNULL, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.mark.parametrize("mode", [[], ["--mode", "windowed", "--window-size", "5", "--overlap-size", "2"]],
                         ids=["streaming", "windowed"])
def test_folder_to_point_cloud_matches_run(cli, tmp_path, mode):
    out = tmp_path / "py"
    proc = run_example("folder_to_point_cloud.py", "--images", TINY / "frames", "--model", TINY / "model.pt",
                       "--image-size", "112", "--scale-frames", "2", "--kv-window", "3", "--threads", "1", *mode, "--out", out)
    assert proc.stdout.count("\nframe ") == 10
    assert ("  window 2" in proc.stdout) == bool(mode)
    run_cli(cli, "run", "--images", TINY / "frames", "--model", TINY / "model.pt", *TINY_CLI_OPTIONS, *mode,
            "--out", tmp_path / "cli")
    assert filecmp.cmp(out / "points.ply", tmp_path / "cli" / "points.ply", shallow=False)
    assert filecmp.cmp(out / "trajectory.tum", tmp_path / "cli" / "trajectory.tum", shallow=False)
    # Its header too: the script gives Exporter run's meta (the "demo" field was missing).
    assert filecmp.cmp(out / "poses.json", tmp_path / "cli" / "poses.json", shallow=False)
    import open3d as o3d
    cloud = o3d.io.read_point_cloud(str(out / "points.ply"))
    assert len(cloud.points) == int(proc.stdout.rsplit(" points, ", 1)[0].rsplit("\n", 1)[-1]) > 0
    assert cloud.has_colors()


def test_folder_script_reports_engine_errors(tmp_path):
    proc = subprocess.run([sys.executable, str(EXAMPLES / "folder_to_point_cloud.py"), "--images", str(tmp_path),
                           "--model", str(TINY / "model.pt"), "--out", str(tmp_path / "o")], capture_output=True,
                          text=True, env=ENV)
    assert proc.returncode == 1
    assert proc.stderr == f"error: no images (.jpg, .jpeg, .png, .bmp) in {tmp_path}\n"
    # An option value the module refuses (ValueError) is one error line too, not a traceback.
    proc = subprocess.run([sys.executable, str(EXAMPLES / "folder_to_point_cloud.py"), "--images", str(TINY / "frames"),
                           "--model", str(TINY / "model.pt"), "--out", str(tmp_path / "o"), "--export", "obj"],
                          capture_output=True, text=True, env=ENV)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: unknown export 'obj' (choose from poses, "), proc.stderr


def test_live_webcam_demo_frames(tmp_path):
    proc = run_example("live_webcam.py", "--demo", "--camera", "demo", "--frames", "5", "--scale-frames", "2",
                       "--threads", "1", "--out", tmp_path)
    assert proc.stdout.count("frame ") == 5 and "5 frames;" in proc.stdout
    poses = json.loads((tmp_path / "poses.json").read_text())
    assert [f["index"] for f in poses["frames"]] == list(range(5))
    assert [f["source"] for f in poses["frames"]] == [f"camera_{i}" for i in range(5)]
    assert (poses["model"], poses["demo"]) == ("built-in demo (random weights)", True)  # as run --demo writes


def test_live_webcam_stops_cleanly_on_ctrl_c(tmp_path):
    proc = subprocess.Popen([sys.executable, str(EXAMPLES / "live_webcam.py"), "--demo", "--camera", "demo",
                             "--scale-frames", "2", "--out", str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV, stdin=subprocess.DEVNULL)
    try:
        for line in proc.stdout:
            if line.startswith("frame     3"):
                proc.send_signal(signal.SIGINT)
                break
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "stopping (Ctrl-C)" in err
    done = int(out.split(" frames; cache")[0].rsplit("\n", 1)[-1])
    poses = json.loads((tmp_path / "poses.json").read_text())
    assert len(poses["frames"]) == done >= 4


def test_readme_five_line_example_runs(tmp_path):
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Python: `lingbot_map`"):]
    code = section[section.index("```python\n") + len("```python\n"):section.index("```\n", section.index("```python\n") + 10)]
    assert len(code.strip().splitlines()) == 5
    script = tmp_path / "example.py"
    script.write_text(code)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=ENV, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert [int(ln.split()[0]) for ln in lines] == list(range(6))
    assert all(ln.endswith("(70, 112)") for ln in lines)

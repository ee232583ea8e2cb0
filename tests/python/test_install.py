"""`cmake --install` puts a working package into LINGBOT_PYTHON_INSTALL_DIR under the prefix."""
import subprocess
import sys

from conftest import BUILD


def test_cmake_install_gives_an_importable_package(tmp_path):
    cache = (BUILD / "CMakeCache.txt").read_text()
    rel = next(line.split("=", 1)[1] for line in cache.splitlines() if line.startswith("LINGBOT_PYTHON_INSTALL_DIR:"))
    subprocess.run(["cmake", "--install", str(BUILD), "--prefix", str(tmp_path), "--component", "python"],
                   check=True, capture_output=True)
    site = tmp_path / rel
    assert sorted(p.name for p in (site / "lingbot_map").iterdir() if p.suffix != ".so") == \
        ["__init__.py", "__init__.pyi", "py.typed"]
    code = ("import lingbot_map as lm, sys; assert lm.__file__.startswith(sys.argv[1]), lm.__file__; "
            "s = lm.Session(lm.Model.demo(), scale_frames=1); print(s.push(lm.demo_frame(0))[0].depth.shape)")
    proc = subprocess.run([sys.executable, "-c", code, str(site)], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(site), "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "(70, 112)\n"

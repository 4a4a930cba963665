"""The wheel holds every package: built from the checkout (not editable), installed into a folder of
its own, and every module of it imported from there, away from the checkout. About 25 s (a pip
build): in `make stress`, which CI runs."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dynamics", "datamodels", "figures")

IMPORT_ALL = """
import importlib, pkgutil, sys
target = sys.argv[1]
names = []
for top in ("dynamics", "datamodels", "figures"):
    package = importlib.import_module(top)
    assert package.__file__.startswith(target), (top, package.__file__)
    names.append(top)
    for info in pkgutil.walk_packages(package.__path__, top + "."):
        if info.name.endswith("__main__"):
            continue  # runs its command line on import
        module = importlib.import_module(info.name)
        assert module.__file__.startswith(target), (info.name, module.__file__)
        names.append(info.name)
print(len(names))
"""


@pytest.mark.stress
def test_the_wheel_installs_and_every_module_imports(tmp_path):
    wheels, target = tmp_path / "wheels", tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    # from a copy without build outputs: setuptools reuses a checkout's build/lib, so a module
    # renamed since the last build would ride along in the wheel from there
    source = tmp_path / "source"
    skip = shutil.ignore_patterns(
        "build", "*.egg-info", ".venv", ".git", "runs", "__pycache__", "node_modules"
    )
    shutil.copytree(ROOT, source, ignore=skip)
    subprocess.run(
        [*pip, "wheel", "--no-deps", "-w", str(wheels), str(source)], check=True, capture_output=True
    )
    (wheel,) = wheels.glob("mhsim-*.whl")
    in_wheel = {n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".py")}
    in_checkout = {
        str(p.relative_to(ROOT))
        for top in PACKAGES
        for p in (ROOT / top).rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert in_checkout <= in_wheel, sorted(in_checkout - in_wheel)
    stale = {n for n in in_wheel - in_checkout if n.split("/")[0] in PACKAGES}
    assert not stale, sorted(stale)  # a module the checkout no longer has
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True)
    out = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL, str(target)],
        cwd=tmp_path,  # not the checkout: only the installed copy can be imported
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu"},
        check=True,
        capture_output=True,
        text=True,
    )
    mains = {n for n in in_checkout if n.endswith("__main__.py")}  # not imported: they run a command line
    assert int(out.stdout.strip()) == len(in_checkout - mains), out.stdout

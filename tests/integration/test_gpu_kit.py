"""``make gpu-kit`` (``scripts/gpu_kit.py``): the wheels a lent GPU machine lacks for ``src/train.py``.

The machine reaches no package registry; its image (``bench/gpu_image_packages.txt``) is CPython
3.12 with torch, transformers, lightning ... but not hydra-core, omegaconf or math-verify. The kit
is built here from PyPI (the default tests need the network, as ``make install`` does) and then
checked offline: every requirement of the project's base install and of every kit wheel, as it
holds on Python 3.12 on Linux, is met by a kit wheel or by the image's list (checked below
independently of the script's own resolver), pip accepts every wheel for Python 3.12 with no
index, and the kit stays under 60 MB. A kit with any one wheel removed fails that check, naming the
wheel. The slow test installs the kit, as ``bench/gpu_check.sh`` does on the machine, into a fresh
venv that holds only what the image would (torch first, then transformers 5.17, lightning 2.6.6
and the rest at most at the image's versions), and runs ``src/train.py debug=smoke`` in it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from arl_testing import ROOT

spec = importlib.util.spec_from_file_location("gpu_kit", ROOT / "scripts" / "gpu_kit.py")
gpu_kit = importlib.util.module_from_spec(spec)
sys.modules["gpu_kit"] = gpu_kit  # its dataclass looks its module up
spec.loader.exec_module(gpu_kit)

IMAGE_LIST = ROOT / "bench" / "gpu_image_packages.txt"
MAX_BYTES = 60e6
# the machine's python3, for markers (independent of the script's own table)
PY312_LINUX = {"python_version": "3.12", "python_full_version": "3.12.3", "implementation_name": "cpython",
               "platform_python_implementation": "CPython", "platform_system": "Linux", "platform_machine": "x86_64",
               "sys_platform": "linux", "os_name": "posix"}


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gpu_kit")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_kit.py"), "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    print(proc.stdout)
    return out


def image_packages() -> dict[str, Version | None]:
    out = {}
    for line in IMAGE_LIST.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[canonicalize_name(name)] = Version(version) if version else None
    return out


def requires_dist(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        lines = zf.read(meta).decode().splitlines()
    return [Requirement(line.split(":", 1)[1]) for line in lines if line.startswith("Requires-Dist:")]


def holds(req: Requirement, extras: set[str]) -> bool:
    """``req`` applies on the machine's python when its package is installed with ``extras``."""
    return req.marker is None or any(req.marker.evaluate({**PY312_LINUX, "extra": e}) for e in extras | {""})


def unmet(kit: Path, image: dict[str, Version | None]) -> list[str]:
    """Every requirement, from pyproject's base dependencies down through the kit's wheels (with the
    extras asked of them), that neither a kit wheel nor the image meets."""
    wheels = {canonicalize_name(parse_wheel_filename(w.name)[0]): w for w in kit.glob("*.whl")}
    base = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    todo = [(Requirement(r), "pyproject.toml") for r in base]
    seen, problems = set(), []
    while todo:
        req, needed_by = todo.pop()
        name = canonicalize_name(req.name)
        if name in image and (image[name] is None or req.specifier.contains(image[name], prereleases=True)):
            continue
        wheel = wheels.get(name)
        if wheel is None or not req.specifier.contains(parse_wheel_filename(wheel.name)[1], prereleases=True):
            problems.append(f"{req} (needed by {needed_by}): {'kit has ' + wheel.name if wheel else 'no kit wheel'}, "
                            f"image has {image.get(name, 'nothing') or 'it without a version'}")
            continue
        if (name, frozenset(req.extras)) not in seen:
            seen.add((name, frozenset(req.extras)))
            todo += [(sub, wheel.name) for sub in requires_dist(wheel) if holds(sub, set(req.extras))]
    return problems


def offline_pip_env() -> dict[str, str]:
    """This machine's pip settings (extra indexes, find-links) left out: the kit alone is the index."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**env, "PIP_CONFIG_FILE": os.devnull}


def test_the_kit_resolves_offline_for_python_312(kit, tmp_path):
    wheels = sorted(kit.glob("*.whl"))
    names = [canonicalize_name(parse_wheel_filename(w.name)[0]) for w in wheels]
    assert len(names) == len(set(names)), names  # one version of each: two stop the whole install
    assert {"hydra-core", "omegaconf", "antlr4-python3-runtime", "math-verify"} <= set(names)
    assert unmet(kit, image_packages()) == []
    size = sum(w.stat().st_size for w in wheels)
    print(f"{len(wheels)} wheels, {size / 1e6:.2f} MB")
    assert size < MAX_BYTES
    tags = ["--python-version", "3.12", "--implementation", "cp", "--abi", "cp312", "--abi", "abi3", "--abi", "none",
            *(a for p in gpu_kit.PLATFORMS for a in ("--platform", p))]
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--find-links", str(kit),
                           "--only-binary=:all:", *tags, "--target", str(tmp_path / "t"), "--no-deps",
                           *map(str, wheels)],
                          env=offline_pip_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (would,) = [line for line in proc.stdout.splitlines() if line.startswith("Would install ")]
    assert sorted(canonicalize_name(d.rsplit("-", 1)[0]) for d in would.split()[2:]) == sorted(names)


def test_a_kit_without_one_of_its_wheels_is_named_unmet(kit, tmp_path):
    """The check above fails when any one wheel is missing, naming it: every wheel of the kit is needed."""
    image = image_packages()
    for wheel in sorted(kit.glob("*.whl")):
        partial = tmp_path / wheel.stem
        shutil.copytree(kit, partial)
        (partial / wheel.name).unlink()
        problems = unmet(partial, image)
        name = canonicalize_name(parse_wheel_filename(wheel.name)[0])
        assert any(canonicalize_name(Requirement(p.split(" (")[0]).name) == name and "no kit wheel" in p
                   for p in problems), (wheel.name, problems)
    # a version the requirement excludes is named too (omegaconf pins antlr 4.9)
    old = tmp_path / "old_antlr"
    shutil.copytree(kit, old)
    antlr = next(old.glob("antlr4_python3_runtime-*.whl"))
    antlr.rename(old / "antlr4_python3_runtime-4.13.2-py3-none-any.whl")
    assert any("antlr4-python3-runtime==4.9.*" in p and "kit has antlr4_python3_runtime-4.13.2" in p
               for p in unmet(old, image)), unmet(old, image)


def test_a_kit_over_its_size_limit_fails_and_leaves_the_old_one(kit):
    before = sorted(w.name for w in kit.glob("*.whl"))
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_kit.py"), "--out", str(kit), "--max-mb", "0.1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1 and "at or over --max-mb 0.1" in proc.stderr, proc.stderr[-2000:]
    assert "total (" in proc.stdout  # the table is printed all the same
    assert sorted(w.name for w in kit.glob("*.whl")) == before


def _fake_wheel(folder: Path, name: str, version: str, requires: list[str]) -> Path:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{name}-{version}.dist-info/METADATA", meta)
    return path


def test_the_resolver_leaves_to_the_image_only_what_it_meets(tmp_path):
    """scripts/gpu_kit.py's resolution, offline on made-up wheels: an image package too old goes into
    the kit, a listed name without a version is left to the image, an extra's requirements are
    followed and markers for other pythons, platforms or extras are not; two requirements no one
    version meets stop it."""
    index = [
        _fake_wheel(tmp_path, "app", "1.0", ["lib[fast]>=2", "numpy>=9", "oldpy; python_version < '3.9'",
                                             "win; sys_platform == 'win32'", "docs; extra == 'docs'"]),
        _fake_wheel(tmp_path, "lib", "2.1", ["rich", "speedup==1.*; extra == 'fast'"]),
        _fake_wheel(tmp_path, "speedup", "1.4", []),
        _fake_wheel(tmp_path, "speedup", "3.0", []),
        _fake_wheel(tmp_path, "numpy", "9.0", []),
    ]

    def fetch(req):  # the newest version that meets req, as pip download picks
        fits = [w for w in index if parse_wheel_filename(w.name)[0] == req.name
                and req.specifier.contains(parse_wheel_filename(w.name)[1])]
        return max(fits, key=lambda w: parse_wheel_filename(w.name)[1])

    image = {"numpy": Version("2.5.2"), "rich": None}
    res = gpu_kit.resolve([Requirement("app")], image, fetch)
    assert {n: res.kit[n].name for n in res.kit} == {
        "app": "app-1.0-py3-none-any.whl", "lib": "lib-2.1-py3-none-any.whl", "numpy": "numpy-9.0-py3-none-any.whl",
        "speedup": "speedup-1.4-py3-none-any.whl"}
    assert sorted(res.from_image) == ["rich"] and res.extras["lib"] == {"fast"}
    table = gpu_kit.table(res, image)
    assert "total (4 wheels)" in table and "rich" in table and "(version not listed)" in table
    with pytest.raises(gpu_kit.KitError, match=r"needs speedup==1\.\*.*, but the kit already has speedup-3\.0"):
        gpu_kit.resolve([Requirement("speedup"), Requirement("app")], image, fetch)


def test_make_gpu_kit_writes_an_ignored_folder():
    recipe = subprocess.run(["make", "-n", "-o", ".venv/.installed", "gpu-kit", "PY=python"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert recipe.returncode == 0 and "python scripts/gpu_kit.py --out gpu_kit" in recipe.stdout, recipe.stderr
    ignored = subprocess.run(["git", "check-ignore", "-q", "gpu_kit/x.whl"], cwd=ROOT, timeout=60)
    assert ignored.returncode == 0  # the device tool carries it by name; it is never committed


# --------------------------------------------------------------------------- on an image-like python


def _pip(python: Path, *args: str, env: dict[str, str] | None = None, timeout: int = 1200) -> None:
    proc = subprocess.run([str(python), "-m", "pip", "install", "-q", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)
    assert proc.returncode == 0, f"pip install {' '.join(args)}:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"


def image_side_requirements(kit: Path) -> list[str]:
    """What the image is relied on for (the script's resolution, replayed offline on the kit), each at
    most at the image's version; torch is installed before, lightning is the pip list's
    pytorch-lightning 2.6.6 (released together; the list gives no version of lightning)."""
    image = image_packages()
    wheels = {canonicalize_name(parse_wheel_filename(w.name)[0]): w for w in kit.glob("*.whl")}
    res = gpu_kit.resolve(gpu_kit.base_requirements(ROOT / "pyproject.toml"), image,
                          lambda req: wheels[canonicalize_name(req.name)])
    assert set(res.kit) == set(wheels)
    versions = {**image, "lightning": Version("2.6.6")}
    names = sorted(set(res.from_image) - {"torch"})
    return [f"{name}<={versions[name]}" if versions[name] else name for name in names]


@pytest.mark.slow
def test_the_kit_runs_the_smoke_run_on_an_image_like_python(kit, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    _pip(python, "torch==2.13.0")  # first: the CPU build on this machine (the image has CUDA torch 2.11)
    wanted = image_side_requirements(kit)
    assert "transformers<=5.17.0" in wanted and "lightning<=2.6.6" in wanted, wanted
    _pip(python, *wanted)
    bare = subprocess.run([str(python), "-c", "import hydra"], capture_output=True, text=True, timeout=120)
    assert bare.returncode != 0  # what the kit brings is not there without it
    site = tmp_path / "site"  # as bench/gpu_check.sh installs it on the machine
    pure = [w for w in kit.glob("*.whl") if gpu_kit.is_pure(w)]
    print("binary kit wheels, not installed on this python:", [w.name for w in kit.glob("*.whl") if w not in pure])
    _pip(python, "--no-index", "--no-deps", "--no-compile", "--target", str(site), *map(str, pure),
         env=offline_pip_env())
    env = {**os.environ, "PYTHONPATH": str(site), "ARL_CACHE": str(tmp_path / "cache")}
    env.pop("VIRTUAL_ENV", None)
    check = subprocess.run([str(python), "-m", "pip", "check"], env=env, capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr  # the kit's requirements, met by what the image has
    versions = subprocess.run([str(python), "-c", ("import transformers, lightning, hydra; "
                                                   "print(transformers.__version__, lightning.__version__, "
                                                   "hydra.__version__)")],
                              env=env, capture_output=True, text=True, timeout=300)
    assert versions.stdout.split() == ["5.17.0", "2.6.6", "1.3.8"], versions.stdout + versions.stderr
    smoke = subprocess.run([str(python), "src/train.py", "debug=smoke", f"paths.log_dir={tmp_path / 'logs'}"], cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=900)
    assert smoke.returncode == 0, smoke.stdout[-3000:] + smoke.stderr[-4000:]
    assert list((tmp_path / "logs" / "debug" / "runs").glob("*/rl_results.json"))
    # env=math_tool: its config composes, and math-verify (antlr 4.9) answers in the helper process
    math = subprocess.run([str(python), "src/train.py", "env=math_tool", "debug=smoke", "dry_run=true"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert math.returncode == 0, math.stdout[-2000:] + math.stderr[-3000:]
    verdicts = subprocess.run(
        [str(python), "-c", ("import sys; sys.path.insert(0, 'src'); "
                             "from arl.envs.math_tool.equivalence import library_equivalent as eq; "
                             "print(eq('(x+1)^2', 'x^2+2x+1'), eq('x^2', 'x^3'))")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert verdicts.stdout.split() == ["True", "False"], verdicts.stdout + verdicts.stderr

"""The wheels a lent GPU machine lacks to run ``python src/train.py`` (``make gpu-kit``).

The lent machines reach no package registry. Their image (``bench/gpu_image_packages.txt``: CPython
3.12 with torch, transformers, lightning, tensorboard ...) lacks a few of the project's base
dependencies (hydra-core, omegaconf, math-verify and what those need). This script resolves the
base dependencies of ``pyproject.toml`` (``[project] dependencies``, not the extras: that is what
``env=sokoban`` and ``env=math_tool`` need) for CPython 3.12 on Linux x86-64 against that list:

* a requirement the image meets is left to it (a package listed without a version is taken to
  meet any version; one whose listed version falls outside the requirement goes into the kit);
* any other is downloaded as a wheel into the kit, and its own requirements (``Requires-Dist``,
  markers evaluated for Python 3.12 on Linux, with the extras asked for) are resolved the same way.

The version taken is the one installed in the python running this script when it meets the
requirement (the versions this checkout is tested with), else the newest one pip finds. A pure
Python wheel (``py3-none-any``) is preferred, then a CPython 3.12 manylinux x86-64 one; a
distribution published as a source archive only (antlr4-python3-runtime 4.9.3, the version
omegaconf pins) is built here with ``pip wheel`` and must come out pure Python.

The project itself needs no wheel: ``src/train.py`` puts ``src/`` on ``sys.path``, and the
processes it starts (environment workers, the math-verify helper, torch.distributed ranks running
``src/train.py``) get that path too.

The kit replaces the wheels of ``--out`` (default ``gpu_kit/``) only when the whole resolution
succeeded; a table of the wheels, their sizes and the total is printed, and the script fails when
the total reaches ``--max-mb`` (default 60 MB: what the device tool carries is at most 64 MiB, the
working tree included). On the machine, ``bash bench/gpu_check.sh`` installs it (or by hand:
``python3 -m pip install --no-index --no-deps --target /tmp/site gpu_kit/*.whl`` and
``PYTHONPATH=/tmp/site``).

Run: ``python scripts/gpu_kit.py [--out gpu_kit] [--image bench/gpu_image_packages.txt] [--max-mb 60]``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PYTHON_VERSION = "3.12"
# the marker environment of the machine's python3 (CPython 3.12.3 on Linux x86-64)
TARGET_ENV = {
    "python_version": PYTHON_VERSION,
    "python_full_version": "3.12.3",
    "implementation_name": "cpython",
    "implementation_version": "3.12.3",
    "platform_python_implementation": "CPython",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "sys_platform": "linux",
    "os_name": "posix",
}
# the image is Ubuntu 24.04 (glibc 2.39): every manylinux tag up to 2.39 installs there
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in range(39, 16, -1)] + ["manylinux2014_x86_64", "manylinux1_x86_64"]
PURE_TAGS = ("--implementation", "py", "--abi", "none", "--platform", "any")
BINARY_TAGS = ("--implementation", "cp", "--abi", "cp312", "--abi", "abi3", "--abi", "none",
               *(arg for p in PLATFORMS for arg in ("--platform", p)))


class KitError(RuntimeError):
    """The kit cannot be built; the message says why."""


# --------------------------------------------------------------------------- inputs


def read_image(path: Path) -> dict[str, Version | None]:
    """The image's packages: canonical name -> version (None where the list gives none)."""
    image: dict[str, Version | None] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = (part.strip() for part in line.partition("=="))
        if not name or (sep and not version):
            raise KitError(f"{path}:{n}: expected NAME or NAME==VERSION, got {line!r}")
        image[canonicalize_name(name)] = Version(version) if version else None
    return image


def base_requirements(pyproject: Path) -> list[Requirement]:
    """``[project] dependencies`` of ``pyproject``: the base install, without the extras."""
    return [Requirement(r) for r in tomllib.loads(pyproject.read_text())["project"]["dependencies"]]


def wheel_requirements(wheel: Path) -> list[Requirement]:
    """The ``Requires-Dist`` lines of a wheel's METADATA."""
    with zipfile.ZipFile(wheel) as zf:
        (meta,) = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        headers = HeaderParser().parsestr(zf.read(meta).decode())
    return [Requirement(r) for r in headers.get_all("Requires-Dist") or []]


def applies(req: Requirement, extras: set[str]) -> bool:
    """Whether ``req`` holds on the machine's python when the package is installed with ``extras``."""
    if req.marker is None:
        return True
    return any(req.marker.evaluate({**TARGET_ENV, "extra": e}) for e in (extras or {""}))


def is_pure(wheel: Path) -> bool:
    """A wheel that installs on any python 3 (``py3-none-any``, ``py2.py3-none-any``)."""
    _, _, _, tags = parse_wheel_filename(wheel.name)
    return all(t.abi == "none" and t.platform == "any" and t.interpreter.startswith("py") for t in tags)


# --------------------------------------------------------------------------- fetching


def pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, check=False)


def pick_version(req: Requirement) -> str:
    """``NAME==V`` for the version installed here when it meets ``req``, else ``NAME<specifier>``."""
    try:
        installed = importlib.metadata.version(req.name)
    except importlib.metadata.PackageNotFoundError:
        installed = None
    if installed is not None and req.specifier.contains(installed, prereleases=True):
        return f"{req.name}=={installed}"
    return f"{req.name}{req.specifier}"


def fetch(req: Requirement, dest: Path) -> Path:
    """One wheel for CPython 3.12 on Linux x86-64 that meets ``req``, saved into ``dest``."""
    spec = pick_version(req)
    errors = []
    for tags in (PURE_TAGS, BINARY_TAGS):
        with tempfile.TemporaryDirectory(dir=dest) as tmp:
            out = pip("download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", PYTHON_VERSION,
                      *tags, "-d", tmp, spec)
            if out.returncode == 0:
                return _move_single_wheel(Path(tmp), dest, spec)
            errors.append(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}")
    return build_pure_wheel(spec, dest, errors)


def build_pure_wheel(spec: str, dest: Path, errors: list[str]) -> Path:
    """``spec`` built here from its source archive (no wheel of it fits Python 3.12); it must be pure."""
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        out = pip("wheel", "-q", "--no-deps", "-w", tmp, spec)
        if out.returncode != 0:
            raise KitError(f"{spec}: no wheel for CPython {PYTHON_VERSION} manylinux x86-64 ({'; '.join(errors)}), "
                           f"and building one from source failed:\n{out.stderr[-2000:]}")
        wheel = _move_single_wheel(Path(tmp), dest, spec)
    if not is_pure(wheel):
        wheel.unlink()
        raise KitError(f"{spec}: no wheel for CPython {PYTHON_VERSION} manylinux x86-64, and the one built here "
                       f"({wheel.name}) is for this machine's python, not the GPU machine's")
    return wheel


def _move_single_wheel(folder: Path, dest: Path, spec: str) -> Path:
    wheels = sorted(folder.glob("*.whl"))
    if len(wheels) != 1:
        raise KitError(f"{spec}: pip left {[w.name for w in wheels]} in {folder}, expected one wheel")
    return Path(shutil.move(str(wheels[0]), dest / wheels[0].name))


# --------------------------------------------------------------------------- resolution


@dataclass
class Resolution:
    kit: dict[str, Path] = field(default_factory=dict)  # canonical name -> wheel
    extras: dict[str, set[str]] = field(default_factory=dict)  # extras asked of each kit package
    from_image: dict[str, list[str]] = field(default_factory=dict)  # name -> the requirements the image meets

    def version(self, name: str) -> Version:
        return parse_wheel_filename(self.kit[name].name)[1]


def resolve(roots: list[Requirement], image: dict[str, Version | None], fetch_wheel) -> Resolution:
    """Every wheel the image lacks for ``roots``; ``fetch_wheel(req) -> Path`` gets one wheel."""
    res = Resolution()
    todo = [(r, "pyproject.toml") for r in roots if applies(r, set())]
    while todo:
        req, needed_by = todo.pop(0)
        name = canonicalize_name(req.name)
        if name in image and _image_meets(req, image[name]):
            res.from_image.setdefault(name, []).append(f"{req} ({needed_by})")
            continue
        if name not in res.kit:
            res.kit[name] = fetch_wheel(req)
            res.extras[name] = set()
            if not req.specifier.contains(res.version(name), prereleases=True):
                raise KitError(f"asked for {req} ({needed_by}), got {res.kit[name].name}")
            new_extras = {""} | set(req.extras)
        else:
            if not req.specifier.contains(res.version(name), prereleases=True):
                raise KitError(f"{needed_by} needs {req}, but the kit already has {res.kit[name].name}")
            new_extras = set(req.extras) - res.extras[name]
        if not new_extras:
            continue
        res.extras[name] |= new_extras - {""}
        wheel = res.kit[name]
        todo += [(sub, wheel.name) for sub in wheel_requirements(wheel) if _newly_needed(sub, new_extras)]
    return res


def _newly_needed(sub: Requirement, new_extras: set[str]) -> bool:
    """Whether a package's requirement ``sub`` starts to apply with ``new_extras`` ("": the package itself)."""
    base = applies(sub, set())
    if base:
        return "" in new_extras
    return any(applies(sub, {e}) for e in new_extras - {""})


def _image_meets(req: Requirement, version: Version | None) -> bool:
    """``version``: the image's (None: listed without one, taken to meet any requirement)."""
    return version is None or req.specifier.contains(version, prereleases=True)


# --------------------------------------------------------------------------- the kit


def build(out: Path, image_list: Path, pyproject: Path, max_mb: float) -> Resolution:
    """Resolve, download into a temporary folder, check the size, then swap the wheels in."""
    image = read_image(image_list)
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="gpu_kit-"))
    try:
        res = resolve(base_requirements(pyproject), image, lambda req: fetch(req, staging))
        print(table(res, image))
        total = sum(w.stat().st_size for w in res.kit.values())
        if total >= max_mb * 1e6:
            raise KitError(f"the kit is {total / 1e6:.1f} MB, at or over --max-mb {max_mb:g}")
        for old in out.glob("*.whl"):
            old.unlink()
        for name, wheel in res.kit.items():
            res.kit[name] = Path(shutil.move(str(wheel), out / wheel.name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return res


def table(res: Resolution, image: dict[str, Version | None]) -> str:
    """The kit's wheels with their sizes and the total, then what the image is relied on for."""
    rows = [f"{'wheel':60s} {'kind':>6s} {'size':>10s}"]
    total = 0
    for name in sorted(res.kit):
        wheel = res.kit[name]
        size = wheel.stat().st_size
        total += size
        rows.append(f"{wheel.name:60s} {'pure' if is_pure(wheel) else 'binary':>6s} {size / 1e3:>7.0f} kB")
    rows.append(f"{f'total ({len(res.kit)} wheels)':60s} {'':>6s} {total / 1e6:>7.2f} MB")
    rows.append("")
    rows.append("left to the image:")
    for name in sorted(res.from_image):
        listed = image[name]
        rows.append(f"  {name:28s} {'==' + str(listed) if listed else '(version not listed)':22s} "
                    f"for {'; '.join(res.from_image[name])}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "gpu_kit", help="the kit's folder (its *.whl are replaced)")
    ap.add_argument("--image", type=Path, default=ROOT / "bench" / "gpu_image_packages.txt",
                    help="the image's packages, NAME or NAME==VERSION a line")
    ap.add_argument("--pyproject", type=Path, default=ROOT / "pyproject.toml")
    ap.add_argument("--max-mb", type=float, default=60.0, help="fail when the wheels total this many MB (1e6 bytes)")
    args = ap.parse_args(argv)
    try:
        build(args.out, args.image, args.pyproject, args.max_mb)
    except KitError as err:
        print(f"gpu kit: FAIL: {err}", file=sys.stderr)
        return 1
    print(f"gpu kit: {args.out} (carry it to the GPU machine; bash bench/gpu_check.sh installs it there)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Answer equivalence: is a model's final answer the same mathematical object as the ground truth?

Three steps, cheapest first:

1. :func:`normalise_answer`, a thin layer: unwrap ``\\boxed{}``/``$...$``/``\\(...\\)``, drop
   ``\\left``/``\\right``, spacing commands, ``\\%``, degrees, dollar signs, trailing units in
   ``\\text{}``, a leading ``x =``; ``\\dfrac``/``\\tfrac`` become ``\\frac``; ``1,000`` becomes
   ``1000``. Identical normalised strings are equivalent.
2. Exact rationals: when both sides are plain numbers (integers, decimals, ``a/b``,
   ``\\frac{a}{b}``), they are compared as :class:`fractions.Fraction` (so ``0.5 == \\frac12``, and
   ``0.333 != \\frac13``).
3. Everything else goes to the maintained `math-verify` library (sympy based: expressions,
   intervals, sets, tuples, matrices, equations), run in a long-lived helper process with a hard
   wall-clock timeout: sympy can hang inside C code (``10^{10^{10}}``), which no in-process
   timeout can interrupt, so a check that takes too long kills the helper (it is restarted on the
   next call) and counts as "not equivalent".

:func:`is_equivalent` never raises and never blocks longer than its timeout (plus, once per
process, the helper's start-up).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import select
import subprocess
import sys
import threading
import time
from fractions import Fraction
from functools import lru_cache

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 5.0
STARTUP_TIMEOUT_S = 120.0
MAX_ANSWER_CHARS = 1000  # longer answers are compared as strings only
WORKER_MEMORY_MB = 2048

# --- normalisation -----------------------------------------------------------------------------
_WRAPPERS = (
    (re.compile(r"^\$\$(.*)\$\$$", re.DOTALL), 1),
    (re.compile(r"^\$(.*)\$$", re.DOTALL), 1),
    (re.compile(r"^\\\((.*)\\\)$", re.DOTALL), 1),
    (re.compile(r"^\\\[(.*)\\\]$", re.DOTALL), 1),
)
_BOX_COMMANDS = ("\\boxed", "\\fbox")
_SPACING = re.compile(r"(?<!\\)\\[,;:! ]|\\q?quad\b|~")
_LEFT_RIGHT = re.compile(r"\\(?:left|right|big|Big|bigg|Bigg)(?![a-zA-Z])\s*")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ|°|\\degree")
_TRAILING_TEXT = re.compile(r"^(.*?[\d}).])\s*\\(?:text|textbf|mbox|mathrm)\{\s*[^{}]*\}$", re.DOTALL)
_UNIT_WORD = re.compile(r"^([+-]?(?:\d[\d,]*(?:\.\d*)?|\.\d+))\s*([a-zA-Z]{2,})[a-zA-Z .]*$")
_NOT_UNITS = {"pi", "sqrt", "inf", "infinity", "or", "and", "to", "times", "over", "cdot"}
_NOT_UNITS |= {"ln", "log", "sin", "cos", "tan", "exp"}
_ASSIGNMENT = re.compile(r"^[a-zA-Z](?:_\{?\w+\}?)?\s*=\s*(?=[^=])")
_THOUSANDS = re.compile(r"^([+-]?)(\d{1,3}(?:(?:,|\{,\}|\\,)\d{3})+)(\.\d+)?$")
_SPACES = re.compile(r"\s+")


def unwrap_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, braces matched.

    ``\\boxed 5`` (no braces) gives ``5``. ``None`` when there is no box or its braces never close.
    """
    starts = [(text.rfind(cmd), cmd) for cmd in _BOX_COMMANDS]
    pos, cmd = max(starts)
    if pos < 0:
        return None
    i = pos + len(cmd)
    while i < len(text) and text[i] == " ":
        i += 1
    if i < len(text) and text[i] != "{":
        match = re.match(r"[^\s$]+", text[i:])
        return match.group(0) if match else None
    if i >= len(text):
        return None
    depth = 0
    for j in range(i, len(text)):
        ch = text[j]
        if ch == "\\":  # an escaped brace does not count
            continue
        if ch == "{" and (j == 0 or text[j - 1] != "\\"):
            depth += 1
        elif ch == "}" and (j == 0 or text[j - 1] != "\\"):
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None


def normalise_answer(text: str) -> str:
    """The thin normalisation applied to both sides before any comparison (see module doc)."""
    s = str(text).strip()
    for _ in range(4):  # nested wrappers such as $\boxed{...}$
        before = s
        for pattern, group in _WRAPPERS:
            match = pattern.match(s)
            if match:
                s = match.group(group).strip()
        if any(cmd in s for cmd in _BOX_COMMANDS):
            inner = unwrap_boxed(s)
            if inner is not None:
                s = inner.strip()
        if s == before:
            break
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = _LEFT_RIGHT.sub("", s)
    s = _SPACING.sub(" ", s)
    s = s.replace("\\%", "").replace("%", "").replace("\\$", "").replace("$", "")
    s = _DEGREES.sub("", s)
    s = s.replace("\\displaystyle", "").strip().rstrip(".").strip()
    match = _TRAILING_TEXT.match(s)
    if match:
        s = match.group(1)
    s = _ASSIGNMENT.sub("", s, count=1)
    s = _SPACES.sub(" ", s).strip().rstrip(".").strip()
    match = _UNIT_WORD.match(s)
    if match and not _THOUSANDS.match(s) and match.group(2).lower() not in _NOT_UNITS:
        s = match.group(1)
    match = _THOUSANDS.match(s)
    if match:
        s = match.group(1) + re.sub(r"\{,\}|\\,|,", "", match.group(2)) + (match.group(3) or "")
    return s


# --- exact rationals ---------------------------------------------------------------------------
_NUMBER = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)$")
_SLASH = re.compile(r"^([+-]?)\s*(\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)$")
_FRAC = re.compile(r"^([+-]?)\s*\\frac\s*(?:\{\s*([+-]?\d+(?:\.\d+)?)\s*\}|(\d))\s*(?:\{\s*(\d+(?:\.\d+)?)\s*\}|(\d))$")


def as_fraction(text: str) -> Fraction | None:
    """The exact value of a normalised plain number (``3``, ``-0.25``, ``7/2``, ``\\frac{7}{2}``,
    ``\\frac72``), else ``None``."""
    s = text.strip()
    if len(s) > 60:
        return None
    try:
        if _NUMBER.match(s):
            return Fraction(s)
        match = _SLASH.match(s)
        if match:
            sign, num, den = match.groups()
            value = Fraction(num) / Fraction(den)
            return -value if sign == "-" else value
        match = _FRAC.match(s)
        if match:
            sign, num_a, num_b, den_a, den_b = match.groups()
            value = Fraction(num_a or num_b) / Fraction(den_a or den_b)
            return -value if sign == "-" else value
    except (ValueError, ZeroDivisionError):
        return None
    return None


# --- the math-verify helper process -------------------------------------------------------------
_WORKER = r'''
import json, resource, sys
for _p in reversed(json.loads(sys.argv[1])):
    if _p not in sys.path:
        sys.path.insert(0, _p)
_mem = int(sys.argv[2])
try:
    resource.setrlimit(resource.RLIMIT_AS, (_mem, _mem))
except (ValueError, OSError):
    pass
import logging
logging.disable(logging.CRITICAL)
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

_CONFIG = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]


def _check(gold, pred, seconds):
    g = parse("\\boxed{" + gold + "}", extraction_config=_CONFIG, parsing_timeout=seconds)
    p = parse("\\boxed{" + pred + "}", extraction_config=_CONFIG, parsing_timeout=seconds)
    if not g or not p:
        return False
    return bool(verify(g, p, timeout_seconds=seconds))


sys.stdout.write("ready\n")
sys.stdout.flush()
for _line in sys.stdin:
    try:
        _req = json.loads(_line)
        if "sleep" in _req:  # a stand-in for a check stuck in C code (tests of the hard timeout)
            import time
            time.sleep(_req["sleep"])
        _ok = _check(_req["g"], _req["p"], _req["t"])
    except BaseException:
        _ok = False
    sys.stdout.write("1\n" if _ok else "0\n")
    sys.stdout.flush()
'''


class _LibraryChecker:
    """One long-lived math-verify helper process per python process (thread-safe, fork-aware)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._owner = -1
        self._failed_at = -1e9
        self.restarts = 0
        self.timeouts = 0

    def _start(self) -> bool:
        if time.monotonic() - self._failed_at < 60.0:
            return False
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", _WORKER, json.dumps(sys.path), str(WORKER_MEMORY_MB * 1024 * 1024)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                close_fds=True,
                start_new_session=True,
            )
        except OSError as err:
            self._failed(f"cannot start the math-verify helper: {err}")
            return False
        line = _read_line(proc.stdout.fileno(), STARTUP_TIMEOUT_S)
        if line != "ready":
            _kill(proc)
            self._failed("the math-verify helper did not start (is math-verify installed?)")
            return False
        self._proc, self._owner = proc, os.getpid()
        self.restarts += 1
        return True

    def _failed(self, message: str) -> None:
        self._failed_at = time.monotonic()
        log.warning("%s; non-numeric answers are compared as normalised strings only", message)

    def check(self, pred: str, gold: str, timeout_s: float) -> bool:
        """math-verify's verdict; ``False`` on a timeout or when the helper is unavailable."""
        inner = max(1, int(timeout_s / 3))
        return self.request({"g": gold, "p": pred, "t": inner}, timeout_s)

    def request(self, payload: dict, timeout_s: float) -> bool:
        """Send one request; ``False`` (and the helper killed) when no answer within ``timeout_s``."""
        with self._lock:
            if self._proc is not None and self._owner != os.getpid():
                self._proc = None  # inherited through fork: the pipes belong to the parent
            if (self._proc is None or self._proc.poll() is not None) and not self._start():
                return False
            proc = self._proc
            try:
                proc.stdin.write((json.dumps(payload) + "\n").encode())
                proc.stdin.flush()
            except (BrokenPipeError, OSError):
                self._close()
                return False
            line = _read_line(proc.stdout.fileno(), timeout_s)
            if line is None:
                self.timeouts += 1
                self._close()
                return False
            return line == "1"

    def _close(self) -> None:
        if self._proc is not None and self._owner == os.getpid():
            _kill(self._proc)
        self._proc = None

    def close(self) -> None:
        with self._lock:
            self._close()


def _read_line(fd: int, timeout_s: float) -> str | None:
    """One line from ``fd`` within ``timeout_s`` (byte by byte after select; replies are tiny)."""
    deadline = time.monotonic() + timeout_s
    buf = b""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            return None
        ch = os.read(fd, 1)
        if not ch:
            return None
        if ch == b"\n":
            return buf.decode("utf-8", errors="replace")
        buf += ch


def _kill(proc: subprocess.Popen) -> None:
    try:
        proc.kill()
        proc.wait(timeout=5)
    except Exception:  # noqa: BLE001, S110 - best effort
        pass
    for pipe in (proc.stdin, proc.stdout):
        try:
            pipe.close()
        except Exception:  # noqa: BLE001, S110 - best effort, as the kill
            pass


_CHECKER = _LibraryChecker()
atexit.register(_CHECKER.close)

_RISKY = (
    re.compile(r"\^\s*\{[^{}]*\^"),  # power towers
    re.compile(r"\*\*[^*]*\*\*"),
    re.compile(r"\^\s*\{?\s*\(?\s*\d{6,}"),  # huge exponents
    re.compile(r"\d{5,}\s*!"),  # huge factorials
)


@lru_cache(maxsize=65536)
def library_equivalent(pred: str, gold: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """math-verify alone on two normalised answers (cached; hard timeout; never raises)."""
    if len(pred) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
        return False
    if any(p.search(pred) or p.search(gold) for p in _RISKY):
        return False
    try:
        return _CHECKER.check(pred, gold, timeout_s)
    except Exception:  # never let a checker bug reach the environment
        log.exception("math-verify check failed")
        return False


def is_equivalent(answer: str, ground_truth: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """Whether ``answer`` is mathematically the same as ``ground_truth`` (see the module doc).

    Both may be bare LaTeX (``\\frac{1}{2}``), boxed (``\\boxed{0.5}``) or in math delimiters
    (``$...$``). An empty answer is never equivalent. Never raises.
    """
    try:
        if not isinstance(answer, str) or not isinstance(ground_truth, str):
            return False
        pred, gold = normalise_answer(answer), normalise_answer(ground_truth)
        if not pred or not gold:
            return False
        if pred == gold:
            return True
        fp, fg = as_fraction(pred), as_fraction(gold)
        if fp is not None and fg is not None:
            return fp == fg
        return library_equivalent(pred, gold, float(timeout_s))
    except Exception:  # hostile input must not reach the caller as an exception
        log.exception("equivalence check failed")
        return False


def checker_stats() -> dict[str, int]:
    """How often the helper process was started and how many checks timed out (diagnostics)."""
    return {"restarts": _CHECKER.restarts, "timeouts": _CHECKER.timeouts}


__all__ = ["as_fraction", "checker_stats", "is_equivalent", "library_equivalent", "normalise_answer", "unwrap_boxed"]

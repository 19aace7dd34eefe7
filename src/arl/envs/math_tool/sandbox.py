"""A sandbox for the python tool: run untrusted model-written code in a throw-away subprocess.

Every run gets a fresh empty temporary directory (its working directory, ``HOME`` and ``TMPDIR``;
deleted afterwards), an empty environment (no variable of the parent is inherited), stdin from
``/dev/null``, and runs in a new session so that the whole process group can be killed. Three
layers, each used when the machine allows it:

1. **Namespaces** (``bwrap``, bubblewrap, when installed and working): new pid, network, ipc and
   uts namespaces; a minimal read-only view of the filesystem (``/usr``, the ``/lib*`` folders,
   the python installation), a private ``/proc``, ``/dev`` and ``/tmp``, the work directory bound
   read-write at ``/sandbox``; it dies with its parent.
2. **Kernel hardening inside the sandboxed process** (``seccomp`` and ``landlock``, no privileges
   needed): a seccomp filter that refuses process creation (threads stay allowed), ``execve``,
   sockets, signals to any other process, and system-administration calls (mount, ptrace, module
   loading, chmod/chown, ...); a landlock ruleset that allows writes only below the work directory
   (plus ``/dev/null``) and, on kernels with landlock ABI >= 4, no TCP at all; capabilities are
   dropped when running as root.
3. **Resource limits** (always): CPU time, address space (``RLIMIT_AS``), file size, number of
   processes, open files, no core dumps; a wall-clock timeout enforced by the parent, which kills
   the process group; output read with a cap (the run is stopped once the cap is exceeded).

Without bubblewrap (or with ``use_bwrap=False``) layers 2 and 3 remain; a warning is logged once.
The user code always runs under a small supervisor process inside the sandbox, so that
``os.kill(os.getppid(), 9)`` hits the supervisor, never the caller. See
``docs/environments/math_tool.md`` for which guarantee holds in which mode.
"""

from __future__ import annotations

import functools
import logging
import os
import platform
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

log = logging.getLogger(__name__)

WARNING_PREFIX = "ARL-SANDBOX-WARNING: "
STATUS_PREFIX = "ARL-SANDBOX-STATUS: "  # the supervisor's last word: "exit N" or "signal N"
SANDBOX_DIR = "/sandbox"  # where the work directory appears inside bwrap
# What the code may read besides the python installation and its work directory (landlock), and
# what bwrap makes visible (read-only) besides the python installation.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/alternatives")
READ_ROOTS = SYSTEM_DIRS + SYSTEM_FILES + ("/dev/urandom", "/dev/zero", "/proc/self")
CODE_FILE = "main.py"

# --- the program that runs inside the sandbox --------------------------------------------------
# It is run as ``python -I -B -c PRELUDE ARGS...`` in the work directory. It sets the rlimits,
# forks a supervisor, and in the child applies landlock, drops capabilities, installs the seccomp
# filter, then executes main.py as ``__main__``. It imports only small built-in modules (start-up
# time matters: one run per tool call).
PRELUDE = r'''
import ctypes, os, resource, struct, sys

# argv: workdir, rlimits "NAME:soft:hard,...", flags "landlock,seccomp", capset nr, seccomp words,
# then the landlock rules "R:/path" (read), "W:/path" (read and write), "N:/dev/null"
_WORKDIR, _LIMITS, _FLAGS, _CAPSET, _WORDS = sys.argv[1:6]
_RULES = sys.argv[6:]
_FLAGS = set(_FLAGS.split(","))


def _warn(msg):
    os.write(2, ("ARL-SANDBOX-WARNING: " + msg + "\n").encode())


for _item in _LIMITS.split(","):
    _name, _soft, _hard = _item.split(":")
    _res, _soft, _hard = getattr(resource, _name), int(_soft), int(_hard)
    _cur_soft, _cur_hard = resource.getrlimit(_res)
    if _cur_hard != resource.RLIM_INFINITY:
        _soft, _hard = min(_soft, _cur_hard), min(_hard, _cur_hard)
    try:
        resource.setrlimit(_res, (_soft, _hard))
    except (ValueError, OSError) as _err:
        _warn(f"{_name} not set: {_err}")

sys.stdout.reconfigure(errors="backslashreplace")
sys.stderr.reconfigure(errors="backslashreplace")

_pid = os.fork()
if _pid:  # the supervisor: wait for the user code and pass its status on
    while True:
        try:
            _, _status = os.waitpid(_pid, 0)
            break
        except ChildProcessError:
            os._exit(255)
        except InterruptedError:
            continue
    _code = os.waitstatus_to_exitcode(_status)
    os.write(2, (f"\nARL-SANDBOX-STATUS: {'signal ' + str(-_code) if _code < 0 else 'exit ' + str(_code)}\n").encode())
    os._exit(_code if _code >= 0 else 128 - _code)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
    _warn("no_new_privs not set: " + os.strerror(ctypes.get_errno()))


def _landlock(rules):
    abi = _libc.syscall(ctypes.c_long(444), None, ctypes.c_long(0), ctypes.c_long(1))
    if abi < 1:
        return "landlock unavailable: " + os.strerror(ctypes.get_errno())
    read = (1 << 0) | (1 << 2) | (1 << 3)  # EXECUTE, READ_FILE, READ_DIR
    write = 0b1111111110010  # WRITE_FILE, REMOVE_DIR/FILE, MAKE_CHAR/DIR/REG/SOCK/FIFO/BLOCK/SYM
    if abi >= 2:
        write |= 1 << 13  # REFER
    if abi >= 3:
        write |= 1 << 14  # TRUNCATE
    file_rights = (1 << 0) | (1 << 1) | (1 << 2) | ((1 << 14) if abi >= 3 else 0)
    net = 0b11 if abi >= 4 else 0  # BIND_TCP, CONNECT_TCP (no rule: no TCP at all)
    scoped = 0b11 if abi >= 6 else 0  # abstract unix sockets and signals outside the domain
    handled = read | write
    attr = struct.pack("=QQQ", handled, net, scoped)[: 8 if abi < 4 else 16 if abi < 6 else 24]
    buf = ctypes.create_string_buffer(attr, len(attr))
    rfd = _libc.syscall(ctypes.c_long(444), buf, ctypes.c_long(len(attr)), ctypes.c_long(0))
    if rfd < 0:
        return "landlock ruleset failed: " + os.strerror(ctypes.get_errno())
    for rule_text in rules:
        mode, path = rule_text.split(":", 1)
        allowed = {"R": read, "W": read | write, "N": read | (1 << 1) | ((1 << 14) if abi >= 3 else 0)}[mode]
        try:
            pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        if not os.path.isdir(path):
            allowed &= file_rights
        rule = ctypes.create_string_buffer(struct.pack("=Qi", allowed & handled, pfd), 12)
        ok = _libc.syscall(ctypes.c_long(445), ctypes.c_long(rfd), ctypes.c_long(1), rule, ctypes.c_long(0))
        os.close(pfd)
        if ok != 0:
            os.close(rfd)
            return f"landlock rule for {path} failed: " + os.strerror(ctypes.get_errno())
    ok = _libc.syscall(ctypes.c_long(446), ctypes.c_long(rfd), ctypes.c_long(0))
    os.close(rfd)
    if ok != 0:
        return "landlock restrict_self failed: " + os.strerror(ctypes.get_errno())
    return None


def _drop_caps():
    hdr = ctypes.create_string_buffer(struct.pack("=Ii", 0x20080522, 0), 8)
    data = ctypes.create_string_buffer(b"\0" * 24, 24)
    if _libc.syscall(ctypes.c_long(int(_CAPSET)), hdr, data) != 0:
        return "capabilities not dropped: " + os.strerror(ctypes.get_errno())
    return None


def _seccomp(encoded):
    mypid = os.getpid()
    words = []
    for word in encoded.split(","):
        c, jt, jf, k = (int(v) for v in word.split("."))
        words.append((c, jt, jf, mypid if k == -1 else k))
    raw = b"".join(struct.pack("=HBBI", *w) for w in words)
    prog_buf = ctypes.create_string_buffer(raw, len(raw))

    class _Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = _Prog(len(words), ctypes.cast(prog_buf, ctypes.c_void_p))
    if _libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        return "seccomp filter not installed: " + os.strerror(ctypes.get_errno())
    return None


if "landlock" in _FLAGS:
    _msg = _landlock(_RULES)
    if _msg:
        _warn(_msg)
if os.geteuid() == 0 and int(_CAPSET) > 0:
    _msg = _drop_caps()
    if _msg:
        _warn(_msg)
if _WORDS:
    _msg = _seccomp(_WORDS)
    if _msg:
        _warn(_msg)
elif "seccomp" in _FLAGS:
    _warn("seccomp unavailable on this architecture")

with open("main.py", "rb") as _fh:
    _source = _fh.read()
sys.argv = ["main.py"]
_globals = {"__name__": "__main__", "__file__": os.path.join(_WORKDIR, "main.py"), "__builtins__": __builtins__}
del ctypes, resource, struct, _fh
exec(compile(_source, "main.py", "exec"), _globals)
'''

# --- the seccomp filter ------------------------------------------------------------------------
_BPF_LD_ABS, _BPF_JEQ, _BPF_JGE, _BPF_JSET, _BPF_RET = 0x20, 0x15, 0x35, 0x45, 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_EPERM, _ENOSYS = 1, 38
_CLONE_THREAD = 0x00010000
_SELF = -1  # placeholder for the sandboxed process id, filled in by the prelude

# Per architecture: the audit arch, the clone/clone3/kill-like numbers, the simply denied calls.
_ARCHES: dict[str, dict[str, Any]] = {
    "x86_64": {
        "audit": 0xC000003E,
        "x32_bit": True,
        "capset": 126,
        "clone": 56,
        "clone3": 435,
        "kill": (62, 200, 234),  # kill, tkill, tgkill: allowed only towards the process itself
        "deny": (
            41, 53,  # socket, socketpair
            57, 58, 59, 322,  # fork, vfork, execve, execveat
            101, 310, 311,  # ptrace, process_vm_readv/writev
            434, 424, 438, 129, 297,  # pidfd_open/send_signal/getfd, rt_(tg)sigqueueinfo
            272, 308, 165, 166, 155, 161,  # unshare, setns, mount, umount2, pivot_root, chroot
            169, 246, 320, 175, 313, 176, 167, 168,  # reboot, kexec, modules, swap
            164, 227, 305, 159, 170, 171,  # clocks, host and domain names
            321, 298, 250, 248, 249, 163, 179, 443,  # bpf, perf, keys, acct, quotactl
            172, 173, 304, 303,  # iopl, ioperm, file handles
            92, 93, 94, 260, 90, 91, 268, 452,  # chown family, chmod family
            188, 189, 190, 197, 198, 199, 133, 259,  # xattr writes, mknod
            323, 300, 425, 426, 427, 428, 429, 430, 431, 432, 433, 442, 135,  # misc
        ),
    },
    "aarch64": {
        "audit": 0xC00000B7,
        "x32_bit": False,
        "capset": 91,
        "clone": 220,
        "clone3": 435,
        "kill": (129, 130, 131),
        "deny": (
            198, 199,  # socket, socketpair
            221, 281,  # execve, execveat
            117, 270, 271,  # ptrace, process_vm_readv/writev
            434, 424, 438, 138, 240,
            97, 268, 40, 39, 41, 51,
            142, 104, 294, 105, 273, 106, 224, 225,
            170, 112, 266, 171, 161, 162,
            280, 241, 219, 217, 218, 89, 60, 443,
            265, 264,
            55, 54, 52, 53, 452,
            5, 6, 7, 14, 15, 16, 33,
            282, 262, 425, 426, 427, 428, 429, 430, 431, 432, 433, 442, 92,
        ),
    },
}
_MACHINE_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def _arch() -> dict[str, Any] | None:
    machine = platform.machine().lower()
    return _ARCHES.get(_MACHINE_ALIASES.get(machine, machine))


def seccomp_filter(allow_subprocesses: bool = False) -> list[tuple[int, int, int, int]] | None:
    """The classic-BPF seccomp program for this machine, as ``(code, jt, jf, k)`` words.

    ``k == -1`` stands for the sandboxed process id (known only after the fork). ``None`` on an
    architecture without a table. With ``allow_subprocesses`` the process-creation calls (fork,
    clone without ``CLONE_THREAD``, execve) stay allowed; everything else is still denied.
    """
    arch = _arch()
    if arch is None:
        return None
    deny_errno = _RET_ERRNO | _EPERM
    prog: list[tuple[int, int, int, int]] = [
        (_BPF_LD_ABS, 0, 0, 4),  # seccomp_data.arch
        (_BPF_JEQ, 1, 0, arch["audit"]),
        (_BPF_RET, 0, 0, deny_errno),  # a foreign ABI (e.g. int 0x80 on x86_64): refuse
        (_BPF_LD_ABS, 0, 0, 0),  # seccomp_data.nr
    ]
    if arch["x32_bit"]:
        prog += [(_BPF_JGE, 0, 1, 0x40000000), (_BPF_RET, 0, 0, _RET_ERRNO | _ENOSYS)]
    process_calls = {57, 58, 59, 322} if arch["audit"] == 0xC000003E else {221, 281}
    for nr in arch["deny"]:
        if allow_subprocesses and nr in process_calls:
            continue
        prog += [(_BPF_JEQ, 0, 1, nr), (_BPF_RET, 0, 0, deny_errno)]
    # clone3 hides its flags in memory: ENOSYS makes libc fall back to clone, checked below
    prog += [(_BPF_JEQ, 0, 1, arch["clone3"]), (_BPF_RET, 0, 0, _RET_ERRNO | _ENOSYS)]
    if not allow_subprocesses:
        prog += [
            (_BPF_JEQ, 0, 4, arch["clone"]),
            (_BPF_LD_ABS, 0, 0, 16),  # args[0] (low word): the clone flags
            (_BPF_JSET, 0, 1, _CLONE_THREAD),
            (_BPF_RET, 0, 0, _RET_ALLOW),
            (_BPF_RET, 0, 0, deny_errno),
        ]
    for nr in arch["kill"]:
        prog += [
            (_BPF_JEQ, 0, 6, nr),
            (_BPF_LD_ABS, 0, 0, 16),  # args[0] low word: the target pid
            (_BPF_JEQ, 0, 3, _SELF),
            (_BPF_LD_ABS, 0, 0, 20),  # args[0] high word must be 0 (no negative pid)
            (_BPF_JEQ, 0, 1, 0),
            (_BPF_RET, 0, 0, _RET_ALLOW),
            (_BPF_RET, 0, 0, deny_errno),
        ]
    prog.append((_BPF_RET, 0, 0, _RET_ALLOW))
    return prog


# --- configuration and results -----------------------------------------------------------------
@dataclass(frozen=True)
class SandboxConfig:
    """Limits and switches of :class:`Sandbox`.

    Attributes:
        timeout_s: wall-clock limit of one run (the process group is killed after it).
        cpu_time_s: CPU-time limit (RLIMIT_CPU; SIGXCPU at the limit, SIGKILL one second later).
        memory_mb: address-space limit (RLIMIT_AS) of the sandboxed python.
        max_processes: RLIMIT_NPROC (not enforced by the kernel for root; the seccomp filter and
            the pid namespace are what stop fork bombs there).
        max_file_mb: largest file the code may write (RLIMIT_FSIZE).
        max_open_files: RLIMIT_NOFILE.
        max_output_bytes: stdout and stderr are each read up to this many bytes; a run that prints
            more is stopped and marked ``output_truncated``.
        use_bwrap: ``None``: bubblewrap when it is installed and works, else the fallback (warning
            logged once); ``True``: require it (error if unusable); ``False``: never.
        seccomp: install the seccomp filter (see the module docstring).
        landlock: restrict writes (and TCP) with landlock when the kernel supports it.
        allow_subprocesses: let the code fork and exec (the filter then only denies the rest).
        base_dir: where the temporary work directories are created (default: the system temp dir).
        python: the interpreter to run (default: this one).
    """

    timeout_s: float = 5.0
    cpu_time_s: int = 5
    memory_mb: int = 1024
    max_processes: int = 64
    max_file_mb: int = 16
    max_open_files: int = 256
    max_output_bytes: int = 65536
    use_bwrap: bool | None = None
    seccomp: bool = True
    landlock: bool = True
    allow_subprocesses: bool = False
    base_dir: str | None = None
    python: str | None = None

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"sandbox timeout_s must be > 0, got {self.timeout_s}")
        for name in ("cpu_time_s", "memory_mb", "max_processes", "max_file_mb", "max_open_files", "max_output_bytes"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"sandbox {name} must be >= 1, got {getattr(self, name)}")

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> SandboxConfig:
        """Build from a plain mapping (e.g. a Hydra node); unknown keys are a clear error."""
        values = dict(values or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown sandbox option(s) {unknown}; valid: {', '.join(sorted(known))}")
        return cls(**values)


@dataclass
class SandboxResult:
    """What one :meth:`Sandbox.run` produced.

    Attributes:
        stdout, stderr: decoded output (each at most ``max_output_bytes``; sandbox warnings are
            removed from stderr and listed in ``warnings``).
        exit_code: the python's exit status (128 + signal when it was killed by a signal).
        signal: the signal that ended the code, if one did (as the supervisor saw it, or the
            supervisor's own when it was killed).
        timed_out: the wall-clock limit was hit.
        output_truncated: more output than ``max_output_bytes`` was produced (the run was stopped).
        backend: ``"bwrap"`` or ``"fallback"``.
        seconds: wall-clock duration.
        workdir: the host path of the (already deleted) work directory.
        warnings: messages of the sandbox itself (a hardening layer that could not be applied).
        timeout_s: the wall-clock limit the run had.
    """

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    output_truncated: bool
    backend: str
    seconds: float
    workdir: str
    warnings: list[str] = field(default_factory=list)
    signal: int | None = None
    timeout_s: float = 0.0

    @property
    def ok(self) -> bool:
        """The code ran to the end without an error."""
        return self.exit_code == 0 and not self.timed_out and not self.output_truncated

    @property
    def error(self) -> str:
        """One line saying what went wrong ("" when ``ok``); deterministic for a given failure."""
        if self.timed_out:
            return f"TimeoutError: the code ran longer than the time limit ({self.timeout_s:g} s)"
        if self.output_truncated:
            return "OutputLimitError: the code printed too much output and was stopped"
        lines = [line.strip() for line in self.stderr.splitlines() if line.strip()]
        if self.signal is not None:
            if self.signal == signal.SIGXCPU:
                return "TimeoutError: CPU time limit exceeded"
            if self.signal == signal.SIGXFSZ:
                return "OSError: file size limit exceeded"
            try:
                name = signal.Signals(self.signal).name
            except ValueError:
                name = str(self.signal)
            return f"KilledError: the code was killed by signal {name}"
        if self.exit_code == 0:
            return ""
        if lines:
            return lines[-1]
        return f"Error: the code exited with status {self.exit_code}"

    def summary(self) -> str:
        """stdout, then the error line if any; a note when there is neither."""
        out = self.stdout.rstrip("\n")
        err = self.error
        if err:
            return f"{out}\n{err}" if out.strip() else err
        return out if out.strip() else "(no output; print() the values you need)"


# --- bubblewrap ------------------------------------------------------------------------------------
_BWRAP_STATE: dict[tuple, bool] = {}
_WARNED: set[str] = set()
_LOCK = threading.Lock()


def _warn_once(key: str, message: str) -> None:
    with _LOCK:
        if key in _WARNED:
            return
        _WARNED.add(key)
    log.warning(message)


def _python_roots(python: str) -> list[str]:
    """Folders that hold the interpreter, its standard library and its site-packages."""
    return list(_python_roots_cached(python, tuple(sys.path)))


@functools.lru_cache(maxsize=16)
def _python_roots_cached(python: str, _path: tuple[str, ...]) -> tuple[str, ...]:
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    exe = os.path.abspath(python)
    candidates.add(os.path.dirname(os.path.dirname(exe)))
    candidates.add(os.path.dirname(os.path.dirname(os.path.realpath(exe))))
    for entry in sys.path:
        if entry and ("site-packages" in entry or "dist-packages" in entry) and os.path.isdir(entry):
            candidates.add(entry)
            candidates.add(os.path.realpath(entry))
    roots = set()
    for path in candidates:
        for p in (os.path.abspath(path), os.path.realpath(path)):
            if os.path.isdir(p) and p != "/" and not p.startswith("/usr/") and p != "/usr":
                roots.add(p)
    # drop folders that lie inside another one
    ordered = sorted(roots, key=len)
    kept: list[str] = []
    for p in ordered:
        if not any(p == k or p.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(p)
    return tuple(kept)


def bwrap_command(workdir: str, python: str) -> list[str]:
    """The bubblewrap argument list that wraps ``python`` (see the module docstring)."""
    cmd = [
        shutil.which("bwrap") or "bwrap",
        "--die-with-parent",
        "--new-session",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for top in SYSTEM_DIRS[1:]:
        if os.path.islink(top):
            cmd += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            cmd += ["--ro-bind", top, top]
    for etc in SYSTEM_FILES:
        cmd += ["--ro-bind-try", etc, etc]
    cmd += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for root in _python_roots(python):
        cmd += ["--ro-bind", root, root]
    cmd += ["--bind", workdir, SANDBOX_DIR, "--chdir", SANDBOX_DIR, "--"]
    return cmd


# --- the sandbox -----------------------------------------------------------------------------------
class Sandbox:
    """Runs python code in a sandboxed subprocess (see the module docstring).

    Args:
        config: a :class:`SandboxConfig` (or ``None`` for the defaults); keyword overrides may be
            given directly, e.g. ``Sandbox(timeout_s=2, use_bwrap=False)``.
    """

    def __init__(self, config: SandboxConfig | None = None, **overrides: Any):
        config = config or SandboxConfig()
        if overrides:
            config = SandboxConfig.from_dict({**asdict(config), **overrides})
        self.config = config
        self.python = config.python or sys.executable
        self._filter = seccomp_filter(config.allow_subprocesses) if config.seccomp else None
        self._capset = (_arch() or {}).get("capset", 0)

    # --- which backend ------------------------------------------------------------------------
    def bwrap_available(self) -> bool:
        """Whether bubblewrap is installed and can run this interpreter (probed once, cached)."""
        exe = shutil.which("bwrap")
        if exe is None:
            return False
        key = (exe, self.python)
        with _LOCK:
            known = _BWRAP_STATE.get(key)
        if known is not None:
            return known
        try:  # generous limits: a slow start must not be mistaken for a broken bwrap
            generous = replace(self.config, timeout_s=60.0, cpu_time_s=30, memory_mb=max(self.config.memory_mb, 512))
            prober = Sandbox(generous)
            probe = prober._run("print(6 * 7)", use_bwrap=True, probe=True)
            works = probe.exit_code == 0 and probe.stdout.strip() == "42"
            reason = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        except OSError as err:
            works, reason = False, str(err)
        if not works:
            _warn_once("bwrap-broken", f"bubblewrap is installed but does not work here ({reason})")
        with _LOCK:
            _BWRAP_STATE[key] = works
        return works

    @property
    def backend(self) -> str:
        """``"bwrap"`` or ``"fallback"``: what :meth:`run` will use."""
        return "bwrap" if self._use_bwrap() else "fallback"

    def _use_bwrap(self) -> bool:
        wanted = self.config.use_bwrap
        if wanted is False:
            return False
        available = self.bwrap_available()
        if wanted is True and not available:
            raise RuntimeError("use_bwrap=True but bubblewrap (bwrap) is not installed or does not work")
        if not available:
            _warn_once(
                "no-bwrap",
                "bubblewrap (bwrap) is not available: the python tool sandbox falls back to rlimits "
                "(+ seccomp/landlock where the kernel has them), without namespaces",
            )
        return available

    # --- running ------------------------------------------------------------------------------
    def run(self, code: str) -> SandboxResult:
        """Run ``code`` as the ``__main__`` module; never raises for anything the code does."""
        return self._run(code, use_bwrap=self._use_bwrap())

    def _run(self, code: str, use_bwrap: bool, probe: bool = False) -> SandboxResult:
        """Run ``code`` once in a fresh work directory (removed afterwards): its output, exit code,
        the signal that ended it and the supervisor's warnings (``probe``: the bwrap probe, which
        logs none of them)."""
        cfg = self.config
        workdir = tempfile.mkdtemp(prefix="arl-sandbox-", dir=cfg.base_dir)
        start = time.monotonic()
        try:
            with open(os.path.join(workdir, CODE_FILE), "w", encoding="utf-8", errors="surrogatepass") as fh:
                fh.write(code)
            proc = self._spawn(workdir, use_bwrap)
            stdout, stderr, timed_out, truncated = self._collect(proc, start + cfg.timeout_s)
            exit_code = proc.returncode
            killed_by = -exit_code if exit_code is not None and exit_code < 0 else None
            if not use_bwrap and (self._filter is None or cfg.allow_subprocesses or WARNING_PREFIX.encode() in stderr):
                _reap_strays(workdir)  # processes that left the group (setsid) are found by argv
            if exit_code is not None and exit_code < 0:
                exit_code = 128 - exit_code
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        err_text, warnings, status = _split_stderr(stderr)
        if status and len(status[-1]) == 2 and status[-1][0] == "signal" and status[-1][1].isdigit():
            killed_by = int(status[-1][1])
        elif killed_by is None and not status and exit_code not in (0, None) and not timed_out and not truncated:
            killed_by = signal.SIGKILL  # the supervisor itself did not finish: it was killed
        if not probe:  # a hardening layer that could not be applied: said once per process
            for message in warnings:
                _warn_once("layer:" + message, f"python sandbox: {message}")
        return SandboxResult(
            stdout=stdout.decode("utf-8", errors="replace"),
            stderr=err_text,
            exit_code=exit_code,
            timed_out=timed_out,
            output_truncated=truncated,
            backend="bwrap" if use_bwrap else "fallback",
            seconds=time.monotonic() - start,
            workdir=workdir,
            warnings=warnings,
            signal=killed_by,
            timeout_s=float(cfg.timeout_s),
        )

    def _spawn(self, workdir: str, use_bwrap: bool) -> subprocess.Popen:
        """Start the supervisor (:data:`PRELUDE`) on the code in ``workdir`` with the configured
        rlimits, layers, seccomp words and landlock rules, inside bwrap when ``use_bwrap``: a new
        session (its own process group), a minimal environment, stdout and stderr piped."""
        cfg = self.config
        inner_dir = SANDBOX_DIR if use_bwrap else workdir
        limits = ",".join(f"{name}:{soft}:{hard}" for name, (soft, hard) in self._rlimits().items())
        flags = ",".join(name for name in ("landlock", "seccomp") if getattr(cfg, name)) or "-"
        words = ",".join(".".join(str(v) for v in word) for word in self._filter or [])
        rules = self._landlock_rules(inner_dir) if cfg.landlock else []
        argv = [self.python, "-I", "-B", "-c", PRELUDE, inner_dir, limits, flags, str(self._capset), words, *rules]
        if use_bwrap:
            argv = bwrap_command(workdir, self.python) + argv
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": inner_dir,
            "TMPDIR": inner_dir,
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "MPLBACKEND": "Agg",
        }
        return subprocess.Popen(
            argv,
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            close_fds=True,
            start_new_session=True,
        )

    def _landlock_rules(self, inner_dir: str) -> list[str]:
        """Read access to the system and python folders (what bwrap binds), writes to the work
        directory and /dev/null only."""
        roots = [p for p in READ_ROOTS if os.path.exists(p)] + _python_roots(self.python)
        return [f"R:{p}" for p in roots] + ["N:/dev/null", f"W:{inner_dir}"]

    def _rlimits(self) -> dict[str, tuple[int, int]]:
        cfg = self.config
        mem = int(cfg.memory_mb) * 1024 * 1024
        fsize = int(cfg.max_file_mb) * 1024 * 1024
        return {
            "RLIMIT_CPU": (int(cfg.cpu_time_s), int(cfg.cpu_time_s) + 1),
            "RLIMIT_AS": (mem, mem),
            "RLIMIT_FSIZE": (fsize, fsize),
            "RLIMIT_NPROC": (int(cfg.max_processes), int(cfg.max_processes)),
            "RLIMIT_NOFILE": (int(cfg.max_open_files), int(cfg.max_open_files)),
            "RLIMIT_CORE": (0, 0),
        }

    def _collect(self, proc: subprocess.Popen, deadline: float) -> tuple[bytes, bytes, bool, bool]:
        """Read both pipes with a cap until the process exits or the deadline; kill the group."""
        cap = int(self.config.max_output_bytes)
        out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
        chunks: dict[int, list[bytes]] = {out_fd: [], err_fd: []}
        sizes = dict.fromkeys(chunks, 0)
        timed_out = truncated = False
        sel = selectors.DefaultSelector()
        for fd in chunks:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        pidfd = _watch_exit(proc.pid, sel)
        open_pipes = set(chunks)
        exited_at: float | None = None
        grace = 0.2  # after the exit, how long descendants may keep the pipes open
        try:
            while True:
                now = time.monotonic()
                if exited_at is None and pidfd is None and _has_exited(proc.pid):
                    exited_at = now
                if exited_at is not None and (not open_pipes or now - exited_at > grace):
                    break
                if now >= deadline:
                    timed_out = exited_at is None
                    break
                wait = deadline - now
                if exited_at is not None:
                    wait = min(wait, grace - (now - exited_at))
                if pidfd is None:
                    wait = min(wait, 0.01)
                for key, _ in sel.select(max(wait, 0.0)):
                    fd = key.fd
                    if fd == pidfd:
                        exited_at = time.monotonic()
                        sel.unregister(fd)
                        continue
                    if _read_pipe(fd, sel, open_pipes, chunks, sizes, cap):
                        truncated = True
                if truncated:
                    break
        finally:
            _end_run(proc, sel, pidfd)
        return b"".join(chunks[out_fd]), b"".join(chunks[err_fd]), timed_out, truncated


def _split_stderr(stderr: bytes) -> tuple[str, list[str], list[list[str]]]:
    """(the code's stderr without the supervisor's lines, the supervisor's warnings, the words of
    its status lines) of a run's raw stderr."""
    err_text = stderr.decode("utf-8", errors="replace")
    lines = err_text.splitlines()
    warnings = [line[len(WARNING_PREFIX):] for line in lines if line.startswith(WARNING_PREFIX)]
    status = [line[len(STATUS_PREFIX):].split() for line in lines if line.startswith(STATUS_PREFIX)]
    if warnings or status:
        kept = [line for line in lines if not line.startswith((WARNING_PREFIX, STATUS_PREFIX))]
        if status and kept and not kept[-1].strip():
            kept.pop()  # the blank line the supervisor writes before its status
        err_text = "\n".join(kept)
    return err_text, warnings, status


def _watch_exit(pid: int, sel: selectors.BaseSelector) -> int | None:
    """A pidfd of ``pid`` registered with ``sel`` (readable once the process exits); None where
    the platform has none (the caller then polls :func:`_has_exited`)."""
    pidfd = None
    try:
        pidfd = os.pidfd_open(pid)
        sel.register(pidfd, selectors.EVENT_READ)
    except (AttributeError, OSError):
        pidfd = None
    return pidfd


def _read_pipe(
    fd: int, sel: selectors.BaseSelector, open_pipes: set[int], chunks: dict[int, list[bytes]], sizes: dict[int, int],
    cap: int,
) -> bool:
    """Read what pipe ``fd`` holds into ``chunks[fd]``, keeping at most ``cap`` bytes, counting all
    in ``sizes[fd]``; at end of file drop it from ``sel`` and ``open_pipes``. True when the pipe's
    output is over the cap."""
    try:
        data = os.read(fd, 65536)
    except BlockingIOError:
        return False
    if not data:
        sel.unregister(fd)
        open_pipes.discard(fd)
        return False
    room = cap - sizes[fd]
    if room > 0:
        chunks[fd].append(data[:room])
    sizes[fd] += len(data)
    return sizes[fd] > cap


def _end_run(proc: subprocess.Popen, sel: selectors.BaseSelector, pidfd: int | None) -> None:
    """Close the selector, kill the sandbox's process group, reap the leader, close every fd."""
    sel.close()
    _kill_group(proc)
    if pidfd is not None:
        os.close(pidfd)
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()


def _has_exited(pid: int) -> bool:
    """Whether ``pid`` (our child) has exited, without reaping it (so its group id stays ours)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _reap_strays(workdir: str, rounds: int = 5) -> int:
    """SIGKILL every process still running the prelude for ``workdir`` (found through
    ``/proc/*/cmdline``): descendants that left the process group. Returns how many were killed."""
    needle = b"\0" + workdir.encode() + b"\0"
    killed = 0
    for _ in range(rounds):
        found = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    cmdline = fh.read()
            except OSError:
                continue
            if needle in cmdline and WARNING_PREFIX.encode() in cmdline:
                try:
                    os.kill(int(entry), signal.SIGKILL)
                    found += 1
                except (ProcessLookupError, PermissionError):
                    pass
        killed += found
        if not found:
            break
        time.sleep(0.01)
    return killed


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the sandbox's process group (the leader is not reaped yet, so the id is ours)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_python(code: str, **config: Any) -> SandboxResult:
    """One-off convenience: ``Sandbox(**config).run(code)``."""
    return Sandbox(**config).run(code)


__all__ = ["PRELUDE", "Sandbox", "SandboxConfig", "SandboxResult", "bwrap_command", "run_python", "seccomp_filter"]


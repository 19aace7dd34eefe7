"""Where this process runs: its global rank, local rank, world size and device, from the launcher.

One function, :func:`resolve_placement`, decides it for everything that places work on a device:
the vLLM engine (whose ``external_launcher`` executor reads ``RANK`` and ``LOCAL_RANK``), the
transformers engine's ``rollout.device: auto``, the behaviour-cloning stage, which may build the
engine before any Trainer exists, and ``src/plan.py``, which prints it.

The launchers, in the order they are recognised (Lightning's own order for the same variables):

* **torchrun** (``torch.distributed.run``) sets ``LOCAL_RANK``, ``RANK`` and ``WORLD_SIZE``;
  **Lightning's spawner** (``python train.py`` with ``devices > 1``: the children, and rank 0 once
  it has launched them) sets ``LOCAL_RANK``, ``WORLD_SIZE`` and ``NODE_RANK`` but no ``RANK``
  (on node 0 the global rank is then the local one). ``LOCAL_RANK`` is this process's own,
  whoever set it, so it wins over SLURM's variables (torchrun started by srun, one task a node).
* **srun** sets ``SLURM_PROCID``, ``SLURM_LOCALID`` and ``SLURM_NTASKS`` but not ``LOCAL_RANK``;
  Lightning's ``SLURMEnvironment`` reads them without exporting anything. A job named ``bash`` or
  ``interactive`` is not an srun launch (Lightning's rule: ``salloc`` shells).
* Neither: one process, rank 0 of 1.

The device of a GPU process is ``cuda:<local rank>``, unless the launcher bound one GPU to each
task (``srun --gpus-per-task=1``: ``CUDA_VISIBLE_DEVICES`` holds one device, which is then
``cuda:0`` in every task), or the trainer lists its devices (``trainer.devices=[4,5,6,7]``, passed
on as ``ARL_TRAINER_DEVICES`` by :func:`export_trainer_devices`): local rank ``i`` then runs on the
list's ``i``-th device, as Lightning places it, so the rollout engines share the trainer's GPU.
A local rank with no such device is an error, not a guess.

:func:`export_placement` writes the result back as ``RANK``/``LOCAL_RANK``/``WORLD_SIZE`` so that
code that reads only those (vLLM) sees the same numbers; ``LOCAL_RANK`` is the *device index*,
which is what vLLM uses it for. :func:`ensure_process_group` starts the default process group
from the placement when work must run before Lightning would start it (Lightning reuses a group
it finds).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

LAUNCHERS = ("torchrun", "lightning", "srun", "single")


class PlacementError(RuntimeError):
    """The environment does not say where this process belongs (and guessing could put several
    ranks on one device)."""


@dataclass(frozen=True)
class Placement:
    """Where one process runs.

    Attributes:
        launcher: one of :data:`LAUNCHERS`.
        global_rank: this process's rank among all (0 .. world_size - 1).
        local_rank: its rank among the processes of its node.
        world_size: the number of processes.
        device: ``cuda:<i>`` or ``cpu``.
    """

    launcher: str
    global_rank: int
    local_rank: int
    world_size: int
    device: str

    @property
    def device_index(self) -> int | None:
        """The CUDA device index, or None on a CPU."""
        return int(self.device.split(":", 1)[1]) if self.device.startswith("cuda:") else None

    def describe(self) -> str:
        return (f"rank {self.global_rank} of {self.world_size} (local rank {self.local_rank}, {self.launcher}) "
                f"on {self.device}")


def _int(env: Mapping[str, str], key: str) -> int:
    try:
        return int(env[key])
    except ValueError:
        raise PlacementError(f"{key}={env[key]!r} is not an integer") from None


def _srun_used(env: Mapping[str, str]) -> bool:
    return "SLURM_NTASKS" in env and env.get("SLURM_JOB_NAME") not in ("bash", "interactive")


def _ranks(env: Mapping[str, str]) -> tuple[str, int, int, int]:
    """(launcher, global rank, local rank, world size) from the launcher's variables."""
    if "LOCAL_RANK" in env:
        local = _int(env, "LOCAL_RANK")
        world = _int(env, "WORLD_SIZE") if "WORLD_SIZE" in env else 1
        if "RANK" in env:
            rank = _int(env, "RANK")
        elif world == 1 or int(env.get("NODE_RANK", env.get("GROUP_RANK", "0")) or 0) == 0:
            rank = local  # Lightning's spawner sets no RANK: on the first node the global rank is the local one
        else:
            raise PlacementError(
                f"LOCAL_RANK={local}, WORLD_SIZE={world} and NODE_RANK={env.get('NODE_RANK')} are set but RANK is not: "
                "this process's global rank cannot be known"
            )
        launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in env or "GROUP_RANK" in env else "lightning"
        return launcher, rank, local, world
    if _srun_used(env):
        world = _int(env, "SLURM_NTASKS")
        missing = [k for k in ("SLURM_PROCID", "SLURM_LOCALID") if k not in env]
        if missing:
            if world > 1:
                raise PlacementError(f"srun with SLURM_NTASKS={world} but {', '.join(missing)} unset")
            return "srun", 0, 0, 1
        return "srun", _int(env, "SLURM_PROCID"), _int(env, "SLURM_LOCALID"), world
    world = _int(env, "WORLD_SIZE") if "WORLD_SIZE" in env else 1
    if world > 1:
        raise PlacementError(
            f"WORLD_SIZE={world} but neither LOCAL_RANK (torchrun, Lightning) nor SLURM_LOCALID (srun) is set: "
            "which device this process owns cannot be known; launch with torchrun or srun"
        )
    return "single", 0, 0, 1


def _visible_gpus(env: Mapping[str, str], cuda_count: int | None) -> int:
    if cuda_count is not None:
        return int(cuda_count)
    import torch  # heavy: placement stays torch-free (train.py's resolvers import it first)

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def trainer_processes(trainer: Mapping, cuda_count: int | None = None) -> int:
    """How many processes a ``trainer`` config starts: devices x nodes, where ``devices`` -1 / ``auto``
    means every visible GPU for a GPU accelerator and one process otherwise, and a list of devices
    counts its entries. ``cuda_count`` stands for ``torch.cuda.device_count()`` (tests)."""
    devices = trainer.get("devices", 1)
    if devices in (-1, "auto", "-1"):
        gpu = str(trainer.get("accelerator")) in ("gpu", "cuda")
        devices = (_visible_gpus({}, cuda_count) if gpu else 1)
    elif isinstance(devices, Sequence) and not isinstance(devices, str):  # a list (or ListConfig) of indices
        devices = len(devices)
    return max(int(devices), 1) * max(int(trainer.get("num_nodes", 1) or 1), 1)


TRAINER_DEVICES = "ARL_TRAINER_DEVICES"


def export_trainer_devices(trainer: Mapping, env: dict | None = None) -> None:
    """Write a listed ``trainer.devices`` (``[4, 5, 6, 7]``) into ``ARL_TRAINER_DEVICES`` (``4,5,6,7``)
    for :func:`resolve_placement`; a count or ``auto`` removes it. ``src/train.py`` and
    ``src/plan.py`` call it at start-up (Lightning's spawned ranks run the same start-up)."""
    env = os.environ if env is None else env
    devices = trainer.get("devices", 1)
    if isinstance(devices, Sequence) and not isinstance(devices, str):
        env[TRAINER_DEVICES] = ",".join(str(int(d)) for d in devices)
    else:
        env.pop(TRAINER_DEVICES, None)


def _listed_devices(env: Mapping[str, str]) -> list[int] | None:
    value = env.get(TRAINER_DEVICES, "").strip()
    if not value:
        return None
    try:
        return [int(d) for d in value.split(",")]
    except ValueError:
        raise PlacementError(f"{TRAINER_DEVICES}={value!r} is not a list of device indices") from None


def resolve_placement(env: Mapping[str, str] | None = None, cuda_count: int | None = None,
                      group: tuple[int, int] | None = None) -> Placement:
    """This process's :class:`Placement`.

    Args:
        env: the environment (default ``os.environ``).
        cuda_count: the number of visible CUDA devices (default: torch's count; 0 without CUDA).
        group: ``(rank, world size)`` of an existing default process group (default: read it when
            one exists). It must agree with the launcher's variables; a group of several ranks
            with no variable that gives the local rank is an error.

    Raises:
        PlacementError: the variables contradict each other, or several processes run and this
            one's local rank (so its device) cannot be known.
    """
    env = os.environ if env is None else env
    launcher, rank, local, world = _ranks(env)
    if group is None:
        import torch.distributed as dist  # heavy: placement stays torch-free (train.py's resolvers import it first)

        if dist.is_available() and dist.is_initialized():
            group = (dist.get_rank(), dist.get_world_size())
    if group is not None and group[1] > 1:
        if launcher == "single":
            raise PlacementError(
                f"a process group of {group[1]} ranks exists but no launcher variable (LOCAL_RANK, SLURM_LOCALID) "
                "says which device this process owns"
            )
        if group != (rank, world):
            raise PlacementError(
                f"the process group says rank {group[0]} of {group[1]}, the launcher ({launcher}) rank {rank} of {world}"
            )
    if not 0 <= rank < world or local < 0:
        raise PlacementError(f"rank {rank} (local {local}) does not fit a world of {world}")
    return Placement(launcher, rank, local, world, _device(env, local, _visible_gpus(env, cuda_count)))


def _device(env: Mapping[str, str], local: int, gpus: int) -> str:
    """The device of local rank ``local`` with ``gpus`` GPUs visible (a listed ``trainer.devices`` first)."""
    listed = _listed_devices(env)
    if gpus == 0:
        return "cpu"
    if listed is not None:
        if local >= len(listed) or not 0 <= listed[local] < gpus:
            raise PlacementError(
                f"local rank {local} with trainer.devices={listed} ({gpus} GPUs visible): no listed device for this rank"
            )
        return f"cuda:{listed[local]}"
    if local < gpus:
        return f"cuda:{local}"
    if gpus == 1:  # one GPU bound to each task (srun --gpus-per-task=1, CUDA_VISIBLE_DEVICES per rank)
        return "cuda:0"
    raise PlacementError(
        f"local rank {local} but only {gpus} GPUs are visible (CUDA_VISIBLE_DEVICES="
        f"{env.get('CUDA_VISIBLE_DEVICES', 'unset')}): more tasks on this node than GPUs"
    )


def export_placement(placement: Placement) -> None:
    """Write ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` of ``placement`` into ``os.environ``.

    ``LOCAL_RANK`` becomes the device index (the local rank on a CPU): vLLM's external launcher
    puts its worker on ``cuda:$LOCAL_RANK``. Lightning keeps reading SLURM's own variables under
    srun, so exporting changes nothing for it.
    """
    index = placement.device_index
    os.environ["RANK"] = str(placement.global_rank)
    os.environ["LOCAL_RANK"] = str(placement.local_rank if index is None else index)
    os.environ["WORLD_SIZE"] = str(placement.world_size)


def ensure_process_group(placement: Placement) -> bool:
    """Start the default process group of a multi-process launch if none exists yet; returns
    whether it started one.

    For work that must run before the first Trainer (the vLLM engine of behaviour cloning's
    untrained validation): vLLM, finding no group, would make a one-rank group of its own, and
    Lightning's launch would then fail. The backend is the one Lightning picks (NCCL with a GPU,
    gloo without); the address comes from ``MASTER_ADDR``/``MASTER_PORT``, or, under srun, from
    Lightning's ``SLURMEnvironment`` (the same values its launch would use). Lightning finds the
    group initialised and keeps it.
    """
    # heavy: placement stays torch-free (train.py's resolvers import it first); binds torch, with torch.distributed
    import torch.distributed

    dist = torch.distributed

    if placement.world_size == 1 or (dist.is_available() and dist.is_initialized()):
        return False
    if placement.launcher == "srun":
        from lightning.fabric.plugins.environments import SLURMEnvironment  # heavy: lightning (~3 s), only under srun

        slurm = SLURMEnvironment()
        os.environ.setdefault("MASTER_ADDR", slurm.main_address)
        os.environ.setdefault("MASTER_PORT", str(slurm.main_port))
    missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise PlacementError(f"{placement.world_size} processes but {', '.join(missing)} unset: cannot start the process group")
    backend = "nccl" if placement.device_index is not None else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(placement.device_index)
    dist.init_process_group(backend, rank=placement.global_rank, world_size=placement.world_size)
    return True


__all__ = ["LAUNCHERS", "Placement", "PlacementError", "ensure_process_group", "export_placement", "resolve_placement"]


# ------------------------------------------------------------------ one run folder for every rank
TIMESTAMP = "%Y-%m-%d_%H-%M-%S"


def shared_run_id(env: Mapping[str, str] | None = None) -> str | None:
    """A name every rank of a multi-process launch reads alike: ``srun`` with several tasks gives
    ``slurm-<job>.<step>``, ``torchrun`` with several processes ``torchrun-<rendezvous id>`` (a
    uuid under ``--standalone``; ``--rdzv-id`` otherwise, unset is ``none``: no id). None for one
    process, or when the launcher gives no id."""
    env = os.environ if env is None else env
    try:
        launcher, _, _, world = _ranks(env)
    except PlacementError:
        return None
    if world <= 1:
        return None
    if launcher == "srun" and env.get("SLURM_JOB_ID"):
        return f"slurm-{env['SLURM_JOB_ID']}" + (f".{env['SLURM_STEP_ID']}" if env.get("SLURM_STEP_ID") else "")
    rdzv = env.get("TORCHELASTIC_RUN_ID", "")
    if launcher == "torchrun" and rdzv and rdzv != "none":
        return f"torchrun-{rdzv}"
    return None


def run_stamp(env: Mapping[str, str] | None = None) -> str:
    """The last part of the default run folder (``configs/hydra/default.yaml``, resolver
    ``arl_run_stamp``): :func:`shared_run_id` when the launcher gives one, else the time to the
    second, which ranks started across a second boundary would read differently
    (:func:`run_folder_problem` refuses that)."""
    return shared_run_id(env) or datetime.datetime.now().strftime(TIMESTAMP)


def run_folder_problem(run_dir: str, placement: Placement, env: Mapping[str, str] | None = None) -> str | None:
    """Why the ranks of this launch may write into different run folders, or None.

    ``run_dir``: this process's ``hydra.run.dir``. Lightning's own spawner hands its run folder to
    the processes it starts; torchrun and srun start every rank on its own, so a folder named by the
    time (the default without a launcher id) can differ between ranks, and their checkpoint shards
    would land in different folders."""
    if placement.world_size <= 1 or placement.launcher not in ("torchrun", "srun") or shared_run_id(env):
        return None
    try:
        datetime.datetime.strptime(os.path.basename(str(run_dir).rstrip("/")), TIMESTAMP)
    except ValueError:
        return None  # a folder the user named: the same on every rank
    how = "srun (SLURM_JOB_ID)" if placement.launcher == "srun" else "torchrun --rdzv-id=<id> (or --standalone)"
    return (f"{placement.world_size} processes started by {placement.launcher} would each name the run folder by the time "
            f"they start ({run_dir}), and ranks started a second apart write into different folders: set "
            f"hydra.run.dir=<one folder for every rank> (e.g. hydra.run.dir=logs/train/runs/$SLURM_JOB_ID), or launch "
            f"with an id the ranks share: {how}")


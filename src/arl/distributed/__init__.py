"""The distributed room: processes, ranks and devices, on the ground floor beside ``utils``.

- :mod:`~arl.distributed.placement`: which launcher started the processes, which device each rank
  drives, the run folder every rank agrees on;
- :mod:`~arl.distributed.ranks`: rank and world size, the collectives the update and the DataModule
  use (sums, maxima, gathers, the barrier), and the random state per rank;
- :mod:`~arl.distributed.fsdp`: FSDP2 sharding, rank-0 loading and the full-weight export;
- :mod:`~arl.distributed.lora_stream`: a LoRA policy's merged weights streamed to the rollout engine;
- :mod:`~arl.distributed.threads`: how many torch threads each process on one machine takes.

It imports no room but ``utils``; every room above may use it.
"""

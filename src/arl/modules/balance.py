"""Token-balanced rows across data-parallel ranks (``rl.balance_tokens``).

Every rank rolls out its own episodes and cuts its rows into the epoch's mini-batches; the global
mini-batch of an optimiser step is the union of every rank's share. The ranks run the same number
of micro-batch passes (the collectives inside them must pair up), so the rank whose share holds the
long rows (an ALFWorld turn late in an episode carries the whole history) sets the pace and the
others pad with zero-loss forwards. Before each step the rows of the global mini-batch are dealt
out again by their token counts:

1. every rank gathers the token count of every row of the mini-batch (a few integers per row);
2. every rank computes the same deal, :func:`balanced_partition` (longest row first, each to the
   rank with the fewest tokens so far);
3. the rows move to their ranks, one ``all_to_all_single`` per tensor of the batch, each row
   trimmed to its own length on the way (:func:`exchange_rows`).

The step's gradient does not change: the loss normalisers are sums over all ranks and the gradients
are summed over ranks, so where a row is computed changes only the order of additions. verl
balances once per iteration on its driver (``balance_batch``, equal row counts per rank); here the
rows never meet on one process, and each optimiser step is balanced on its own.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from arl.distributed import ranks as dist_utils


def balanced_partition(costs: Sequence[int], parts: int) -> list[int]:
    """The part (0 .. ``parts`` - 1) of each item of ``costs`` (N,), such that the parts' cost sums
    are nearly equal: items are taken heaviest first (ties by index) and each goes to the part
    with the smallest sum so far (ties to the lower part). Deterministic, so every rank computes
    the same deal. Longest-processing-time-first: the heaviest part is at most 4/3 of the best
    possible, and at most the mean part plus the heaviest item."""
    if parts < 1:
        raise ValueError(f"parts must be at least 1, got {parts}")
    order = sorted(range(len(costs)), key=lambda i: (-int(costs[i]), i))
    heap = [(0, p) for p in range(parts)]
    out = [0] * len(costs)
    for i in order:
        load, p = heapq.heappop(heap)
        out[i] = p
        heapq.heappush(heap, (load + int(costs[i]), p))
    return out


def part_loads(costs: Sequence[int], assignment: Sequence[int], parts: int) -> list[int]:
    """The cost sum of each part, (parts,), of ``assignment`` (N,) over ``costs`` (N,)."""
    loads = [0] * parts
    for c, p in zip(costs, assignment):
        loads[p] += int(c)
    return loads


def imbalance(loads: Sequence[int]) -> float:
    """The heaviest load over the mean load (1.0: perfectly balanced; 1.0 when all are empty)."""
    total = sum(loads)
    return max(loads) * len(loads) / total if total else 1.0


@dataclass(frozen=True)
class Deal:
    """One mini-batch's deal: the token count of every row on every rank (``lengths[r]``: rank
    ``r``'s rows in their order) and the rank each row goes to (``dest[r]``, the same shape)."""

    lengths: list[list[int]]
    dest: list[list[int]]

    @property
    def world(self) -> int:
        return len(self.lengths)

    def loads_before(self) -> list[int]:
        return [sum(ls) for ls in self.lengths]

    def loads_after(self) -> list[int]:
        return part_loads([n for ls in self.lengths for n in ls], [d for ds in self.dest for d in ds], self.world)


def deal_rows(lengths: Sequence[Sequence[int]]) -> Deal:
    """The deal of rows whose token counts are ``lengths[r]`` on rank ``r`` (every rank's list):
    :func:`balanced_partition` over all rows, ranks as parts; where that would not lower the
    heaviest rank's tokens (the greedy deal is no optimum: ``[[4, 75, 73], [4, 4, 72, 70]]`` as they
    stand weigh 152 and 150, dealt 153 and 149), every row stays where it is, which also moves nothing."""
    lengths = [list(map(int, ls)) for ls in lengths]
    flat = [n for ls in lengths for n in ls]
    assignment = balanced_partition(flat, len(lengths))
    dest, k = [], 0
    for ls in lengths:
        dest.append(assignment[k : k + len(ls)])
        k += len(ls)
    deal = Deal(lengths, dest)
    if max(deal.loads_after(), default=0) >= max(deal.loads_before(), default=0):
        return Deal(lengths, [[rank] * len(ls) for rank, ls in enumerate(lengths)])
    return deal


def exchange_rows(
    rows: Mapping[str, torch.Tensor] | None,
    deal: Deal,
    rank: int,
    device: torch.device,
    schema: Sequence[tuple[str, torch.dtype, int]],
    pad_values: Mapping[str, float] | None = None,
) -> dict[str, torch.Tensor]:
    """The rows ``deal`` sends to ``rank``: a collective, every rank of the group calls it.

    Args:
        rows: this rank's rows, right-padded ``(m, L)`` and ``(m,)`` tensors keyed by name (None
            or ``m == 0`` when it has none); row ``i`` holds ``deal.lengths[rank][i]`` real tokens.
        deal: the same :class:`Deal` on every rank.
        rank: this process's rank in the group.
        device: where the collective's tensors live (the backend's device).
        schema: ``(name, dtype, ndim)`` of every tensor, the same on every rank (a rank without
            rows does not know it).
        pad_values: the padding of each ``(m, L)`` tensor (0 when absent), e.g. ``turn_row`` -1.

    Returns the received rows, ``(m', L')`` and ``(m',)``: the rows of rank 0 dealt here (in
    their order), then rank 1's, ...; ``L'`` is their longest length.
    """
    pad_values = pad_values or {}
    mine = deal.lengths[rank]
    order = sorted(range(len(mine)), key=lambda i: deal.dest[rank][i])  # by destination, stable
    incoming = [(src, n) for src in range(deal.world) for n, d in zip(deal.lengths[src], deal.dest[src]) if d == rank]
    width = max((n for _, n in incoming), default=0)
    out: dict[str, torch.Tensor] = {}
    for name, dtype, ndim in schema:
        size = (lambda n: n) if ndim == 2 else (lambda n: 1)  # elements a row sends
        if rows is not None and len(mine):
            t = rows[name].to(device)
            pieces = [t[i, : mine[i]] if ndim == 2 else t[i : i + 1] for i in order]
            send = torch.cat(pieces) if pieces else torch.empty(0, dtype=dtype, device=device)
        else:
            send = torch.empty(0, dtype=dtype, device=device)
        in_splits = [sum(size(n) for n, d in zip(mine, deal.dest[rank]) if d == dst) for dst in range(deal.world)]
        out_splits = [sum(size(n) for s, n in incoming if s == src) for src in range(deal.world)]
        recv = torch.empty(sum(out_splits), dtype=dtype, device=device)
        dist.all_to_all_single(recv, send.contiguous(), out_splits, in_splits)
        if ndim == 1:
            out[name] = recv
            continue
        table = torch.full((len(incoming), width), pad_values.get(name, 0), dtype=dtype, device=device)
        lengths = torch.tensor([n for _, n in incoming], dtype=torch.long, device=device)
        table[torch.arange(width, device=device)[None, :] < lengths[:, None]] = recv  # rows in order, row-major
        out[name] = table
    return out


def tensor_schema(rows: Mapping[str, torch.Tensor] | None) -> list[tuple[str, torch.dtype, int]] | None:
    """``(name, dtype, ndim)`` of every tensor of ``rows``, in a fixed order (None without rows)."""
    if not rows:
        return None
    bad = [k for k, v in rows.items() if v.dim() not in (1, 2)]
    if bad:
        raise ValueError(f"rows to balance are (m,) or (m, L) tensors; {', '.join(bad)} are not")
    return [(k, rows[k].dtype, rows[k].dim()) for k in sorted(rows)]


def rebalance(
    rows: Mapping[str, torch.Tensor] | None, device: torch.device, pad_values: Mapping[str, float] | None = None
) -> tuple[dict[str, torch.Tensor] | None, Deal]:
    """Deal the rows of one global mini-batch out to the data-parallel ranks by tokens: a
    collective (every rank calls it, with its share ``rows``, right-padded, ``attention_mask``
    among them, or None). Returns this rank's new rows (None when it receives none; on one process
    the rows as they are) and the :class:`Deal`."""
    world, rank = dist_utils.world_size(), dist_utils.rank()
    lengths = rows["attention_mask"].sum(-1).tolist() if rows else []
    if world <= 1:
        return (dict(rows) if rows else None), Deal([lengths], [[0] * len(lengths)])
    gathered = dist_utils.all_gather_object((lengths, tensor_schema(rows)))
    deal = deal_rows([g[0] for g in gathered])
    schema = next((g[1] for g in gathered if g[1]), None)
    if schema is None:  # no rank has a row
        return None, deal
    out = exchange_rows(rows, deal, rank, device, schema, pad_values)
    return (out if out[schema[0][0]].shape[0] else None), deal

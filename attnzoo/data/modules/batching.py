"""Training order and variable-length batches: the one epoch-seeded shuffle every DataModule uses, dynamic padding
to the longest sequence, and length bucketing.

The order of an epoch is a function of (run seed, epoch) alone, never of the global random state, so a run resumed
mid-epoch reads the batches the uninterrupted run would have read, and one process reads in each epoch the samples
that N DDP processes read together (Lightning swaps `EpochShuffle` for a `DistributedSampler` with the same seed).

Notation: B batch, L the longest sequence in the batch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, Sampler, SequentialSampler

Tensor = torch.Tensor
IGNORE_INDEX = -100  # the label of positions no loss counts (padding): torch's cross_entropy default


def run_seed(fallback: int) -> int:
    """The seed the training order follows: `seed_everything`'s (Lightning's DistributedSampler takes the same), else
    `fallback` (the DataModule's own seed)."""
    return int(os.environ.get("PL_GLOBAL_SEED", fallback))


def loader_generator(train: bool, num_workers: int, seed: int) -> torch.Generator | None:
    """A DataLoader's generator: an evaluation loader with workers (kept alive between validations) has its own, as
    making its iterator draws the workers' seed, which from the global stream would shift every later random draw of
    training (dropout) by one, in a resumed run at another time than in the uninterrupted one. None (the global
    stream) for a training loader, whose draws the resume restores, and without workers (one draw per validation, in
    both runs alike)."""
    return torch.Generator().manual_seed(seed) if num_workers > 0 and not train else None


class EpochShuffle(RandomSampler):
    """A new permutation each epoch, seeded by (seed + epoch) exactly as Lightning's DistributedSampler is.

    So one process reads, in each epoch, the same samples in the same order as the union of N DDP processes
    (which Lightning gives `DistributedSampler(seed=PL_GLOBAL_SEED)` in place of this RandomSampler), and a
    resumed run sees the order it would have seen.
    """

    def __init__(self, data: Dataset, *, seed: int) -> None:
        super().__init__(data)
        self.seed, self.epoch = seed, 0

    def set_epoch(self, epoch: int) -> None:  # Lightning calls this every epoch
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(torch.randperm(len(self.data_source), generator=generator).tolist())


class TokenDataset(Dataset):
    """Pre-tokenized sequences (1-D integer tensors) and their class indices."""

    def __init__(self, ids: Sequence[Tensor], labels: Sequence[int]) -> None:
        if len(ids) != len(labels):
            raise ValueError(f"{len(ids)} sequences but {len(labels)} labels")
        self.ids = list(ids)
        self.labels = torch.as_tensor(list(labels), dtype=torch.long)
        self.lengths = [len(x) for x in self.ids]

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        return self.ids[i], self.labels[i]


class PadCollate:
    """Pads a list of (ids, label) to the batch's longest sequence (rounded up to `multiple`).

    Returns {"tokens": [B, L] long, "padding_mask": [B, L] bool (True = pad), "label": [B] long}.
    """

    def __init__(self, *, pad_id: int, multiple: int = 1) -> None:
        if multiple < 1:
            raise ValueError(f"pad_to_multiple ({multiple}) must be >= 1")
        self.pad_id = pad_id
        self.multiple = multiple

    def __call__(self, items: list[tuple[Tensor, Tensor]]) -> dict[str, Tensor]:
        lengths = torch.tensor([len(ids) for ids, _ in items])
        longest = -(-int(lengths.max()) // self.multiple) * self.multiple
        tokens = torch.full((len(items), longest), self.pad_id, dtype=torch.long)  # [B, L]
        for row, (ids, _) in enumerate(items):
            tokens[row, : len(ids)] = ids
        padding_mask = torch.arange(longest)[None, :] >= lengths[:, None]  # [B, L]
        return {"tokens": tokens, "padding_mask": padding_mask, "label": torch.stack([y for _, y in items])}


class BucketBatchSampler(BatchSampler):
    """Batches of similar lengths, so little compute goes to padding.

    Takes the epoch's indices from `sampler` (`EpochShuffle` for training; Lightning swaps in a `DistributedSampler`
    under DDP), sorts each pool of `pool * batch_size` of them by length, cuts the pool into batches and, with
    `shuffle`, visits the batches in an order drawn from (the sampler's seed + epoch). The batches of an epoch are
    fixed before the first one is read, so `skip_batches(n)` (a resume mid-epoch) leaves out exactly the first n.
    """

    def __init__(
        self,
        sampler: Sampler[int],
        batch_size: int,
        drop_last: bool,
        *,
        lengths: Sequence[int],
        pool: int = 50,
        shuffle: bool = True,
    ) -> None:
        super().__init__(sampler, batch_size, drop_last)
        if pool < 1:
            raise ValueError(f"bucket pool ({pool}) must be >= 1 batches")
        self.lengths = lengths
        self.pool = pool
        self.shuffle = shuffle
        self._skip = 0

    def skip_batches(self, n: int) -> None:
        """The next pass leaves out its first `n` batches (the ones a resumed run already trained on)."""
        self._skip = n

    def _order(self, n: int) -> list[int]:
        if not self.shuffle:
            return list(range(n))
        # EpochShuffle and DistributedSampler both carry the run seed and the epoch Lightning set on them
        seed, epoch = getattr(self.sampler, "seed", 0), getattr(self.sampler, "epoch", 0)
        return torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch)).tolist()

    def __iter__(self) -> Iterator[list[int]]:
        indices = list(self.sampler)
        size = self.pool * self.batch_size
        batches = []
        for start in range(0, len(indices), size):
            chunk = sorted(indices[start : start + size], key=self.lengths.__getitem__)
            batches += [chunk[i : i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
        if self.drop_last and batches and len(batches[-1]) < self.batch_size:
            batches.pop()
        skip, self._skip = self._skip, 0
        for i in self._order(len(batches))[skip:]:
            yield batches[i]

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


def sequence_loader(
    dataset: Dataset,
    *,
    batch_size: int,
    train: bool,
    drop_last: bool,
    num_workers: int,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    seed: int,
    bucket: bool = False,
    pool: int = 50,
) -> DataLoader:
    """A DataLoader over `dataset`, shuffled when `train` (`EpochShuffle` from `run_seed(seed)`); with `bucket`,
    batches of similar lengths (`BucketBatchSampler` over `dataset.lengths`, `pool` batches sorted at a time)."""
    common = {
        "collate_fn": collate_fn,
        "num_workers": num_workers,
        "persistent_workers": num_workers > 0,
        "generator": loader_generator(train, num_workers, seed),
    }
    sampler = EpochShuffle(dataset, seed=run_seed(seed)) if train else SequentialSampler(dataset)
    if not bucket:
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=drop_last, **common)
    batches = BucketBatchSampler(sampler, batch_size, drop_last, lengths=dataset.lengths, pool=pool, shuffle=train)
    return DataLoader(dataset, batch_sampler=batches, **common)

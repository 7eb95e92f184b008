"""The one training order of every DataModule: a function of (seed, epoch) alone, as Lightning's DistributedSampler,
with length buckets visited in an order of the same kind, and a resume that skips whole batches."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DistributedSampler

from attnzoo.data import DATAMODULES
from attnzoo.data.modules.batching import BucketBatchSampler, EpochShuffle, TokenDataset

N = 103


def _dataset() -> TokenDataset:
    lengths = torch.randint(1, 60, (N,), generator=torch.Generator().manual_seed(0)).tolist()
    return TokenDataset([torch.ones(n, dtype=torch.long) for n in lengths], [0] * N)


@pytest.mark.parametrize("epoch", [0, 3])
def test_epoch_shuffle_is_the_order_of_lightnings_distributed_sampler_whatever_the_global_rng(epoch):
    ds = _dataset()
    ours, theirs = EpochShuffle(ds, seed=7), DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True, seed=7)
    ours.set_epoch(epoch)
    theirs.set_epoch(epoch)
    torch.manual_seed(1)
    first = list(ours)
    torch.manual_seed(2)
    assert first == list(ours) == list(theirs)
    assert sorted(first) == list(range(N)) and first != list(range(N))


def _buckets(sampler, *, epoch: int = 0, drop_last: bool = True) -> BucketBatchSampler:
    sampler.set_epoch(epoch)
    return BucketBatchSampler(sampler, 8, drop_last, lengths=_dataset().lengths, pool=4)


@pytest.mark.parametrize("kind", ["single", "ddp"])
def test_bucket_order_follows_seed_and_epoch_not_the_global_rng(kind):
    def sampler():
        ds = _dataset()
        if kind == "single":
            return EpochShuffle(ds, seed=7)
        return DistributedSampler(ds, num_replicas=2, rank=1, shuffle=True, seed=7)

    torch.manual_seed(1)
    first = list(_buckets(sampler()))
    torch.manual_seed(2)
    assert list(_buckets(sampler())) == first
    assert list(_buckets(sampler(), epoch=1)) != first
    lengths = _dataset().lengths
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in first) / len(first)
    assert spread < 20  # still buckets of similar lengths


@pytest.mark.parametrize("drop_last", [True, False])
def test_skip_batches_leaves_out_exactly_the_first_batches_of_one_pass(drop_last):
    buckets = _buckets(EpochShuffle(_dataset(), seed=7), epoch=2, drop_last=drop_last)
    full = list(buckets)
    buckets.skip_batches(5)
    assert list(buckets) == full[5:]
    assert list(buckets) == full  # only the pass after the resume skips


def test_every_datamodule_shuffles_training_with_the_epoch_shuffle():
    """Each DataModule's training order is `EpochShuffle`'s (directly, or under the bucket sampler)."""
    text = DATAMODULES["text"](batch_size=16, listops={"num_train": 200, "num_val": 50, "num_test": 50, "max_len": 30})
    audio = DATAMODULES["audio"](
        sample_rate=8000, n_mels=32, clip_seconds=0.5, batch_size=4, synthetic={"per_class": {"train": 2}}
    )
    for dm in (text, audio):
        dm.setup("fit")
        loader = dm.train_dataloader()
        sampler = getattr(loader.batch_sampler, "sampler", None)
        assert isinstance(sampler, EpochShuffle), (type(dm).__name__, type(sampler).__name__)
        val = dm.val_dataloader()
        assert not isinstance(getattr(val.batch_sampler, "sampler", None), EpochShuffle)


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=8),
    fraction=st.floats(0.05, 0.6),
    seed=st.integers(0, 3),
)
def test_a_held_out_val_part_is_stratified_and_leaves_every_class_an_example_to_train(sizes, fraction, seed):
    from collections import Counter

    from attnzoo.data.modules.base import held_out

    labels = [c for c, n in enumerate(sizes) for _ in range(n)]
    if len(labels) < 2:
        return
    train, val = held_out(labels, fraction, seed)
    assert sorted(train + val) == list(range(len(labels))) and val  # a partition, val never empty
    asked = min(max(1, round(fraction * len(labels))), len(labels) - 1)
    room = sum(n - 1 for n in sizes)  # what val may take without a class's last example
    assert len(val) == (min(asked, room) if room else asked)
    held = Counter(labels[i] for i in val)
    for c, n in enumerate(sizes):
        if room:
            assert held[c] <= n - 1  # every class keeps an example to train on
            if held[c] < n - 1:  # a class below its cap holds its share, rounded down, or more
                assert held[c] >= int(len(val) * n / len(labels)) or len(val) < asked
    assert held_out(labels, fraction, seed) == (train, val)  # a function of the seed

import os

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed_and_threads():
    # one intra-op thread in every test: results do not depend on the machine's core count, and no test inherits
    # the thread count an earlier one left behind (an in-process run applies its trainer.num_threads globally)
    torch.set_num_threads(1)
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _not_in_a_slurm_job(monkeypatch):
    # a suite run inside a SLURM job (`srun pytest`) trains as on a workstation: under SLURM, fit names run directories
    # after the job id and requeues it on SIGUSR1. tests/run/test_slurm.py sets the variables it needs.
    for key in [k for k in os.environ if k.startswith("SLURM_")]:
        monkeypatch.delenv(key)


@pytest.fixture(autouse=True)
def _no_imports_from_configs(monkeypatch):
    # configs may not name code by import path unless a test opts in (--allow-imports sets the variable in-process;
    # monkeypatch puts it back afterwards), whatever the developer's shell has
    monkeypatch.setenv("ATTNZOO_ALLOW_IMPORTS", "0")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)

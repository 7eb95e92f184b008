import pytest
import torch


@pytest.fixture(autouse=True)
def _seed_and_threads():
    # one intra-op thread in every test: results do not depend on the machine's core count, and no test inherits
    # the thread count an earlier one left behind (an in-process run applies its trainer.num_threads globally)
    torch.set_num_threads(1)
    torch.manual_seed(0)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)

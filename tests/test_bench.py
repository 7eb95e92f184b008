"""`attnzoo bench`: the GPU suite refuses clearly where there is no CUDA device (it runs on a lent GPU machine)."""

import pytest
import torch

from attnzoo import bench


def test_gpu_suite_says_it_needs_a_cuda_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a CUDA device"):
        bench.main(["gpu", "--quick"])

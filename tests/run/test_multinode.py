"""Multi-node training through torchrun, for real on one machine: two node processes on 127.0.0.1 (gloo, CPU).

Lightning detects the TorchElastic environment torchrun sets; `trainer.num_nodes=2 trainer.devices=1` then trains one
process per node. After one SGD step, 2 nodes x batch b hold exactly the weights of 1 process x batch 2b. Both nodes
work in the one run directory global rank 0 names, and only rank 0 writes into it.
"""

import csv
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnzoo.config import load
from attnzoo.run import build
from tests.helpers import QUICK, TINY, VIT

ROOT = Path(__file__).resolve().parents[2]
ONE_STEP = [
    *QUICK[:3],
    *TINY,
    "trainer.precision=32-true",
    "trainer.max_steps=1",
    "trainer.limit_val_batches=0",
    "trainer.num_sanity_val_steps=0",
    "trainer.log_every_n_steps=1",
    "task.optimizer={kind: sgd, lr: 0.5, weight_decay: 0.0}",
    "task.scheduler=null",
    "run.test=false",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]


@pytest.mark.slow  # ~35 s; DDP's equality with one process runs by default (tests/test_fit.py), this its launch
@pytest.mark.skipif(shutil.which("torchrun", path=os.path.dirname(sys.executable)) is None, reason="no torchrun")
def test_two_torchrun_nodes_equal_one_process_with_the_double_batch(tmp_path):
    torchrun = str(Path(sys.executable).parent / "torchrun")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("ATTNZOO_RUN_DIR", None)
    port = _free_port()
    fit = ["-m", "attnzoo.fit", "--config", str(VIT), *ONE_STEP]
    nodes = [
        subprocess.Popen(
            [
                torchrun,
                "--nnodes=2",
                "--nproc-per-node=1",
                f"--node-rank={rank}",
                "--master-addr=127.0.0.1",
                f"--master-port={port}",
                *fit,
                "trainer.num_nodes=2",
                "trainer.devices=1",
                "trainer.strategy=ddp",
                "data.batch_size=4",
                f"run.dir={tmp_path / 'two_nodes'}",
                # node 1 alone would name another directory for sure (timestamps may agree by chance): it must not
                *([] if rank == 0 else ["run.name=node1"]),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for rank in (0, 1)
    ]
    outputs = [node.communicate(timeout=300)[0] for node in nodes]
    for rank, (node, out) in enumerate(zip(nodes, outputs, strict=True)):
        assert node.returncode == 0, f"node {rank}:\n{out[-3000:]}"
    single = subprocess.run(
        [sys.executable, *fit, "trainer.devices=1", "data.batch_size=8", "--run-dir", str(tmp_path / "single")],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert single.returncode == 0, single.stderr[-3000:]
    (run_dir,) = (tmp_path / "two_nodes" / "vit").iterdir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["single", "two_nodes"]
    assert [p.name for p in (tmp_path / "two_nodes").iterdir()] == ["vit"], "node 1 wrote a run dir of its own"
    assert f"run directory {run_dir} (global rank 0's; rank 1 had named" in outputs[1], outputs[1][-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["global_step"] == 1 and summary["run_dir"] == str(run_dir)
    # written once, by rank 0: one train row, the files of one run, no lock left, nothing of Lightning's own
    with open(run_dir / "metrics.csv", newline="") as f:
        assert [r["step"] for r in csv.DictReader(f)] == ["0"]
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "checkpoints", "config.yaml", "labels.json", "metrics.csv", "summary.json"]  # fmt: skip
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["last.ckpt"]
    assert "node1" not in (run_dir / "config.yaml").read_text()  # rank 0's config
    two, one = _weights(run_dir), _weights(tmp_path / "single")
    _, task, _ = build(load([tmp_path / "single" / "config.yaml"]))  # the seeded initial weights
    moved = max((one[k] - v).abs().max().item() for k, v in task.state_dict().items())
    assert moved > 1e-3, "the optimizer step did not change the weights; the comparison would be vacuous"
    assert two.keys() == one.keys()
    for key, value in one.items():
        torch.testing.assert_close(two[key], value, atol=1e-6, rtol=1e-5, msg=key)

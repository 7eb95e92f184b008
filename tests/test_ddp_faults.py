"""DDP with 2 CPU processes: when one process dies mid-training the whole run exits non-zero promptly (no hang)."""

import os
import subprocess
import sys
import time

import pytest

from tests.helpers import QUICK, ROOT, TINY, VIT

_DIES = """
import os, sys
import lightning as L
from attnzoo.config import load
from attnzoo.run import fit

class Die(L.Callback):  # a process dies like a killed one: no cleanup, no message to the others
    def on_train_batch_end(self, trainer, *args):
        if trainer.global_rank == {rank} and trainer.global_step == 2:
            os._exit(7)

fit(load([sys.argv[1]], sys.argv[2:]), extra_callbacks=[Die()])
"""


_POISONED = """
import sys
import lightning as L
from attnzoo.config import load
from attnzoo.run import fit

class Poison(L.Callback):  # process 1 alone reads a batch with an infinite pixel at step 2
    def on_train_batch_start(self, trainer, module, batch, i):
        if trainer.global_rank == 1 and trainer.global_step == 2:
            batch["image"][0, 0, 0, 0] = float("inf")

fit(load([sys.argv[1]], sys.argv[2:]), extra_callbacks=[Poison()])
"""


# a tiny ViT on 2 DDP processes, 50 steps at most, no validation or test
TWO_PROCESSES = [
    *QUICK[:3],
    *TINY,
    "trainer.devices=2",
    "trainer.strategy=ddp",
    "trainer.num_threads=1",
    "trainer.max_steps=50",
    "trainer.limit_val_batches=0",
    "trainer.num_sanity_val_steps=0",
    "data.batch_size=4",
    "run.test=false",
]


@pytest.mark.slow
@pytest.mark.parametrize("rank", [1, 0])
def test_a_dead_ddp_process_ends_the_whole_run_non_zero_without_hanging(rank, tmp_path):
    script = tmp_path / "dies.py"  # a file: Lightning's DDP launcher re-runs the command per process
    script.write_text(_DIES.format(rank=rank))
    overrides = [*TWO_PROCESSES, f"run.dir={tmp_path}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, str(script), str(VIT), *overrides], env=env, cwd=ROOT, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _, err = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        pytest.fail("the DDP run hung after one of its processes died")
    print(f"rank {rank} died -> exit {proc.returncode} after {time.monotonic() - start:.0f} s")
    assert proc.returncode != 0, err[-3000:]
    # the other rank goes too (within seconds): nothing of the run's session keeps running
    for _ in range(60):
        leftover = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout.split()
        if not leftover:
            break
        time.sleep(1)
    else:
        os.killpg(proc.pid, 9)
        pytest.fail(f"processes left running 60 s after the run exited: {leftover}")


def test_a_signal_to_a_ddp_run_is_said_once_and_without_lightnings_weights_only_warning(tmp_path):
    """Every process caught the stop and printed it (the line came twice), and the checkpoint saved on the signal
    warned that `weights_only` was not set, beside the README's "checkpoints are loaded as tensors only"."""
    overrides = [*TWO_PROCESSES, "run.baseline=false"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "ATTNZOO_TEST_SELF_SIGNAL": "SIGTERM@3"}
    cmd = [sys.executable, "-m", "attnzoo.fit", "--config", str(VIT), *overrides, "--run-dir", str(tmp_path / "r")]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 143, proc.stderr[-3000:]
    assert proc.stderr.count("attnzoo fit: SIGTERM received: stopped at step 4") == 1, proc.stderr[-3000:]
    assert "weights_only" not in proc.stderr


def test_a_non_finite_loss_in_one_process_stops_every_process_and_the_summary_names_it(tmp_path):
    """Process 1 raised NonFiniteLossError alone; process 0 died in the gradient all-reduce, and summary.json (which
    it writes) recorded "RuntimeError: ... Connection closed by peer" as why the run stopped."""
    import json

    script = tmp_path / "poisoned.py"  # a file: Lightning's DDP launcher re-runs the command per process
    script.write_text(_POISONED)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(script), str(VIT), *TWO_PROCESSES, "run.baseline=false", f"run.dir={tmp_path / 'r'}"]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode != 0, proc.stderr[-3000:]
    (summary,) = (tmp_path / "r").rglob("summary.json")
    stopped = json.loads(summary.read_text())["stopped"]
    assert "NonFiniteLossError" in str(stopped) and "non-finite training loss in process 1 at global step 2" in str(
        stopped
    ), stopped
    assert "1 non-finite" in proc.stderr  # process 1's own error names its batch's infinite pixel

"""`attnzoo.evaluate` stopped by a signal (a clear message, a non-zero exit, no partial metrics written), and the
names of its reports."""

import os
import re
import signal
import subprocess
import sys

import pytest

from attnzoo.config import load
from attnzoo.run import fit
from attnzoo.run.signals import SELF_SIGNAL_ENV
from tests.helpers import ROOT, TINY_RUN, VIT


@pytest.mark.parametrize("sig, split", [("SIGTERM", "test"), pytest.param("SIGINT", "val", marks=pytest.mark.slow)])
def test_a_signal_during_evaluate_exits_128_plus_the_signal_and_writes_no_metrics(sig, split, tmp_path):
    run_dir = fit(load([VIT], [*TINY_RUN, "trainer.max_epochs=1", f"run.dir={tmp_path}"]))
    env = {**os.environ, "PYTHONPATH": str(ROOT), SELF_SIGNAL_ENV: f"{sig}@test", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "attnzoo.evaluate", str(run_dir), "--split", split, "trainer.limit_test_batches=2"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 128 + signal.Signals[sig], done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    expected = f"attnzoo evaluate: {sig} received: the evaluation of {run_dir / 'checkpoints' / 'best.ckpt'} stopped"
    assert expected in done.stderr and "no metrics written" in done.stderr, done.stderr[-3000:]
    assert done.stdout == ""  # no metrics of part of the split
    assert not (run_dir / "evaluate-best.json").exists()


def test_a_checkpoint_file_from_elsewhere_gets_a_report_name_of_its_own(tmp_path):
    """`--checkpoint <another run>/checkpoints/best.ckpt` must not replace this run's evaluate-best.json."""
    from attnzoo.evaluate import checkpoint_name

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    assert checkpoint_name(run, run / "checkpoints" / "epoch=3.ckpt") == "epoch=3"
    other = checkpoint_name(run, tmp_path / "other" / "checkpoints" / "best.ckpt")
    third = checkpoint_name(run, tmp_path / "third" / "checkpoints" / "best.ckpt")
    assert re.fullmatch(r"best-[0-9a-f]{8}", other) and other != third

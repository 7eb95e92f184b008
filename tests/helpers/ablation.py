"""Ablation tests' pieces: a tiny grid, and stand-ins for `attnzoo.fit` that the launchers run instead."""

import json
from pathlib import Path

# a ViT that trains 2 optimizer steps in well under a second
TINY_VIT = {
    "model.embed_dim": 16,
    "model.depth": 1,
    "model.num_heads": 2,
    "model.mlp_ratio": 1.0,
    "data.batch_size": 16,
    "trainer.max_steps": 2,
    "trainer.limit_train_batches": 2,
    "trainer.limit_val_batches": 1,
    "trainer.limit_test_batches": 1,
    "trainer.num_sanity_val_steps": 0,
    "trainer.enable_model_summary": False,
    "trainer.log_every_n_steps": 1,
}


def write_grid(tmp_path: Path, axes: dict, seeds=(0,), fixed=None, name="grid.yaml") -> Path:
    """A grid file of `axes` with `seeds` (None: no seeds: list), its fixed overrides the tiny ViT's plus `fixed`."""
    path = tmp_path / name
    grid = {"fixed": {**TINY_VIT, **(fixed or {})}, "axes": axes}
    path.write_text(json.dumps(grid if seeds is None else {"seeds": list(seeds), **grid}))
    return path


# a fit that writes a summary at once; a run whose backend is eager fails as if out of memory
FAKE_FIT = """
import json, sys
from pathlib import Path
args = sys.argv[1:]
run_dir = Path(args[args.index("--run-dir") + 1])
if any(a == 'model.attention.backend="eager"' for a in args):
    print("Traceback (most recent call last):", file=sys.stderr)
    print("RuntimeError: out of memory (pretend)", file=sys.stderr)
    sys.exit(1)
seed = int(next(a for a in args if a.startswith("seed="))[5:])
summary = {"test": {"test/acc": 0.5 + 0.1 * seed}, "best": {"path": "x", "val/acc": 0.4}, "parameters": 1000,
           "train_samples_per_second": 100.0 + 20 * seed, "attention_backends": {"sdpa": 1}, "peak_rss_bytes": 2**30}
(run_dir / "summary.json").write_text(json.dumps(summary))
"""

# a fit that runs until stopped: on SIGINT/SIGTERM it "saves" for a moment and exits 130/143 as attnzoo fit does
SLOW_FIT = """
import json, os, signal, sys, time
from pathlib import Path
args = sys.argv[1:]
run_dir = Path(args[args.index("--run-dir") + 1])
if os.environ.get("FAKE_FIT") == "fast":
    summary = {"test": {"test/acc": 0.5}, "best": {"path": "x", "val/acc": 0.5}}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    sys.exit(0)
got = []
signal.signal(signal.SIGINT, lambda s, f: got.append(s))
signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
(run_dir / "started").write_text("")
while not got:
    time.sleep(0.05)
time.sleep(1.0)  # writing its checkpoint
sys.exit(128 + got[0])
"""

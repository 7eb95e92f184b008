"""Trainer switches (`attnzoo.run.switches`): precision auto, activation checkpointing and compile from config."""

import json
import warnings
from pathlib import Path

import pytest
import torch

from attnzoo.config import ConfigError, load
from attnzoo.models.vit import ViT
from attnzoo.run import fit
from attnzoo.run import switches as perf

ROOT = Path(__file__).resolve().parents[2]
VIT = ROOT / "recipes" / "vit.yaml"
QUICK = ["trainer.enable_progress_bar=false", "trainer.enable_model_summary=false", "trainer.accelerator=cpu"]
QUICK += ["trainer.devices=1", "trainer.num_sanity_val_steps=0", "run.test=false"]
TINY = ["model.embed_dim=16", "model.depth=2", "model.num_heads=2", "model.patch_size=7", "model.mlp_ratio=1.0"]


# ------------------------------------------------------------------------------------------------ precision

# (accelerator, cuda available, cuda bf16, cpu bf16 flags) -> resolved precision
AUTO_CASES = [
    ("cpu", False, False, False, "32-true"),
    ("cpu", False, False, True, "bf16-mixed"),
    ("cpu", True, True, False, "32-true"),  # accelerator=cpu wins over a present GPU
    ("auto", True, True, False, "bf16-mixed"),
    ("gpu", True, False, False, "16-mixed"),
    ("auto", False, False, False, "32-true"),
]


@pytest.mark.parametrize("accelerator,cuda,cuda_bf16,cpu_bf16,expected", AUTO_CASES)
def test_precision_auto_resolves_by_hardware(monkeypatch, accelerator, cuda, cuda_bf16, cpu_bf16, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: cuda_bf16)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "test GPU")
    monkeypatch.setattr(perf, "cpu_has_fast_bf16", lambda: cpu_bf16)
    value, why = perf.resolve_precision("auto", accelerator)
    assert value == expected and why


@pytest.mark.parametrize("explicit", ["32-true", "bf16-mixed", "16-mixed", 64])
def test_explicit_precision_is_kept(explicit):
    assert perf.resolve_precision(explicit, "cpu")[0] == explicit


def test_cpu_bf16_detection_reads_the_cpu_flags(monkeypatch):
    monkeypatch.delenv(perf.CPU_BF16_ENV, raising=False)
    flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
    assert perf.cpu_has_fast_bf16() == ("amx_bf16" in flags)


@pytest.mark.parametrize("forced", ["0", "1"])
def test_the_test_switch_forces_each_precision_branch(monkeypatch, forced):
    monkeypatch.setenv(perf.CPU_BF16_ENV, forced)
    expected = "bf16-mixed" if forced == "1" else "32-true"
    assert perf.resolve_precision("auto", "cpu")[0] == expected


def test_the_test_switch_rejects_other_values(monkeypatch):
    monkeypatch.setenv(perf.CPU_BF16_ENV, "yes")
    with pytest.raises(ValueError, match="ATTNZOO_CPU_BF16"):
        perf.cpu_has_fast_bf16()


# ------------------------------------------------------------------------------------------------ checkpointing

CHECKPOINTING = [  # config value -> (Encoder.checkpoint_every, blocks with checkpoint_attention)
    (True, 1, []),
    (False, 0, []),
    ({"every": 2}, 2, []),
    ({"enabled": True, "every": 1, "attention_only": True}, 0, [0, 1, 2, 3]),
    ({"every": 3, "attention_only": True}, 0, [0, 3]),
    ({"enabled": False, "every": 2}, 0, []),
]


@pytest.mark.parametrize("value,every,attention_blocks", CHECKPOINTING, ids=str)
def test_grad_checkpointing_config_reaches_every_encoder(value, every, attention_blocks):
    net = ViT(img_size=28, patch_size=7, in_chans=1, num_classes=3, embed_dim=16, depth=4, num_heads=2)
    perf.apply_grad_checkpointing(net, value)
    assert net.encoder.checkpoint_every == every
    assert [i for i, b in enumerate(net.encoder.blocks) if b.checkpoint_attention] == attention_blocks


BAD_CHECKPOINTING = [
    ("{every: 0}", "every"),
    ("{every: 1.5}", "every"),
    ("{evry: 2}", "unknown keys"),
    ("{attention_only: 1}", "true/false"),
    ("three", "not a valid"),
]


@pytest.mark.parametrize("value,message", BAD_CHECKPOINTING)
def test_bad_grad_checkpointing_config_names_the_key(value, message):
    with pytest.raises(ConfigError, match=message) as err:
        load([VIT], [f"trainer.grad_checkpointing={value}"])
    assert "trainer.grad_checkpointing" in str(err.value)


def test_grad_checkpointing_on_a_net_without_encoder_raises():
    with pytest.raises(ValueError, match="no attnzoo Encoder"):
        perf.apply_grad_checkpointing(torch.nn.Linear(2, 2), True)


# ------------------------------------------------------------------------------------------------ runs


def _run(tmp_path, *extra):
    overrides = [*QUICK, *TINY, "data.batch_size=32", "trainer.log_every_n_steps=1", f"run.dir={tmp_path}", *extra]
    run_dir = fit(load([VIT], overrides))
    return run_dir, json.loads((run_dir / "summary.json").read_text())


def test_auto_precision_and_checkpointing_run_and_are_recorded(tmp_path):
    run_dir, summary = _run(
        tmp_path,
        "trainer.precision=auto",
        "trainer.grad_checkpointing={every: 2, attention_only: true}",
        "trainer.max_steps=4",
        "trainer.limit_val_batches=1",
    )
    expected = perf.resolve_precision("auto", "cpu")[0]
    saved = load([run_dir / "config.yaml"]).section("trainer")
    assert saved["precision"] == expected and summary["precision"] == expected  # resolved value saved and used
    assert saved["grad_checkpointing"] == {"every": 2, "attention_only": True}
    assert summary["global_step"] == 4
    assert 0.0 <= summary["data_wait_share"] < 1.0


def test_a_run_asked_for_fp16_on_a_cpu_keeps_the_request_and_records_what_ran(tmp_path):
    # Lightning has no fp16 AMP on a CPU and trains in bf16-mixed, with its own warning: config.yaml keeps what was
    # asked (a resume asks the same), summary.json says what ran
    run_dir, summary = _run(
        tmp_path, "trainer.precision=16-mixed", "trainer.max_steps=1", "trainer.limit_val_batches=1"
    )
    assert load([run_dir / "config.yaml"]).section("trainer")["precision"] == "16-mixed"
    assert summary["precision"] == "bf16-mixed"


@pytest.mark.slow  # bf16 autocast on a CPU without bf16 instructions is ~13x slower than fp32
def test_bf16_mixed_reaches_the_accuracy_of_fp32_within_one_point(tmp_path):
    # bf16 autocast on a CPU without bf16 instructions is slow (see benchmarks/results/train_step.md): keep it small
    steps = ["trainer.max_epochs=1", "trainer.limit_train_batches=100", "data.batch_size=32", "task.scheduler=null"]
    steps += ["model.embed_dim=48", "model.depth=1", "model.mlp_ratio=2.0", "task.optimizer.weight_decay=0.0"]
    acc = {p: _run(tmp_path / p, f"trainer.precision={p}", *steps)[1]["metrics"]["val/acc"] for p in PRECISIONS}
    assert acc["32-true"] > 0.3, f"fp32 did not learn ({acc}); the comparison would be vacuous"
    assert acc["bf16-mixed"] >= acc["32-true"] - 0.01, acc


PRECISIONS = ["32-true", "bf16-mixed"]


@pytest.mark.slow
def test_compiled_vit_matches_eager_forward_and_backward():
    net = ViT(img_size=28, patch_size=7, in_chans=1, num_classes=3, embed_dim=16, depth=2, num_heads=2)
    compiled = ViT(img_size=28, patch_size=7, in_chans=1, num_classes=3, embed_dim=16, depth=2, num_heads=2)
    compiled.load_state_dict(net.state_dict())
    perf.compile_net(compiled)
    assert compiled.state_dict().keys() == net.state_dict().keys()  # checkpoints stay loadable
    x = torch.randn(4, 1, 28, 28)
    outs = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for model in (net, compiled):
            out = model(x)
            out.square().sum().backward()
            outs.append((out.detach(), [p.grad for p in model.parameters()]))
    # tracing `auto` met no functools cache wrapper (Dynamo warns about each one, in every user's compiled run)
    assert not [w for w in caught if "lru_cache" in str(w.message)]
    torch.testing.assert_close(outs[1][0], outs[0][0], atol=1e-5, rtol=1e-4)
    for a, b in zip(outs[1][1], outs[0][1], strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.slow
def test_compile_switch_trains(tmp_path):
    _, summary = _run(tmp_path, "trainer.compile=true", "trainer.max_steps=3", "trainer.limit_val_batches=1")
    assert summary["global_step"] == 3 and summary["metrics"]["train/loss"] > 0

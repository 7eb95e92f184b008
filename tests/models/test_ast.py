"""AST: patch counts by the paper's formula, position interpolation to other clip lengths, attention from config."""

import pytest
import torch

from attnzoo.models import MODELS
from attnzoo.models.ast import AST, TimeWindow, patch_grid

RATE = 8000
TINY = dict(sample_rate=RATE, n_mels=32, embed_dim=32, depth=2, num_heads=2)


def tiny(**kw) -> AST:
    return MODELS["ast"](**{"num_classes": 5, "target_frames": 98, **TINY, **kw})


def ast_formula(n_mels: int, frames: int, fstride: int, tstride: int, patch: int = 16) -> int:
    """The AST paper's patch count: f_dim * t_dim with f_dim = (F - 16) // fstride + 1, t_dim likewise."""
    return ((n_mels - patch) // fstride + 1) * ((frames - patch) // tstride + 1)


def test_paper_setting_gives_1212_patches():
    # 128 mel bins x 1024 frames, 16x16 patches, stride 10 in both axes: 12 x 101 patches (AST paper, Sec. 2)
    assert patch_grid(128, 1024) == (101, 12)  # (time, frequency)
    assert ast_formula(128, 1024, 10, 10) == 1212


@pytest.mark.parametrize("seconds", [0.25, 0.5, 1.0, 1.37])
@pytest.mark.parametrize("fstride,tstride", [(10, 10), (16, 16), (8, 12), (16, 6)])
def test_patch_count_equals_the_ast_formula(seconds, fstride, tstride):
    model = tiny(fstride=fstride, tstride=tstride).eval()
    samples = int(RATE * seconds)
    frames = 1 + (samples - 200) // 80  # 25 ms windows every 10 ms at 8 kHz, frames inside the clip
    assert model.logmel.num_frames(samples) == frames
    feats = model.features(torch.randn(2, samples))
    assert feats.shape == (2, 32, frames)
    tokens = model.tokens(feats)
    expected = ast_formula(32, frames, fstride, tstride)
    assert model.num_patches(samples) == expected
    assert tokens.shape == (2, 2 + expected, 32)


def test_trained_on_1s_runs_on_2s_with_interpolated_positions():
    model = tiny().eval()
    assert model.train_grid_size == (9, 2)  # 98 frames x 32 mels: (time, frequency)
    torch.testing.assert_close(model.tokens(model.features(torch.zeros(1, RATE)))[0, 2:] * 0 + 1, torch.ones(18, 32))
    out = model(torch.randn(3, 2 * RATE))
    assert out.shape == (3, 5) and torch.isfinite(out).all()
    assert model.num_patches(2 * RATE) == 2 * 19
    # the interpolated table keeps each frequency row's embedding and stretches time: its ends stay close
    model.patch_embed.weight.data.zero_()
    model.patch_embed.bias.data.zero_()
    long_tokens = model.tokens(torch.zeros(1, 32, 198))[0, 2:].reshape(19, 2, 32)  # [Tp, Fp, D]
    table = model.pos_embed[0, 2:].reshape(9, 2, 32)
    assert (long_tokens[0] - table[0]).abs().max() < (table[0] - table[-1]).abs().max()
    short = model(torch.randn(2, RATE // 2))  # shorter clips too
    assert short.shape == (2, 5)


@pytest.mark.parametrize("seconds", [0.5, 1.0, 2.0])
def test_the_patch_grid_is_time_by_frequency_for_any_clip_length(seconds):
    model = tiny(fstride=16, tstride=6).eval()
    samples = int(RATE * seconds)
    frames = model.logmel.num_frames(samples)
    assert model.grid_size_for(samples) == ((frames - 16) // 6 + 1, 2)  # (time, frequency): 32 mels -> 2
    assert model.train_grid_size == model.grid_size_for(RATE)  # target_frames 98 is one second at 8 kHz
    tp, fp = model.grid_size_for(samples)
    tokens = model.tokens(model.features(torch.zeros(1, samples)))
    assert tokens.shape[1] == 2 + tp * fp and model.num_patches(samples) == tp * fp


def test_same_length_uses_the_table_unchanged():
    model = tiny().eval()
    model.patch_embed.weight.data.zero_()
    model.patch_embed.bias.data.zero_()
    tokens = model.tokens(torch.zeros(1, 32, 98))
    torch.testing.assert_close(tokens[0, 2:], model.pos_embed[0, 2:])
    torch.testing.assert_close(tokens[0, :2], (model.prefix + model.pos_embed[:, :2])[0])


@pytest.mark.parametrize("dist_token", [True, False])
def test_pooling_is_the_mean_of_cls_and_distillation_outputs(dist_token):
    model = tiny(dist_token=dist_token).eval()
    seen = {}
    model.head.register_forward_pre_hook(lambda m, args: seen.update(pooled=args[0]))
    model.encoder.register_forward_hook(lambda m, args, out: seen.update(out=out))
    model(torch.randn(2, RATE))
    n = 2 if dist_token else 1
    assert model.num_prefix_tokens == n
    torch.testing.assert_close(seen["pooled"], seen["out"][:, :n].mean(1))


ATTENTION = {
    "full": None,
    "full_eager": {"backend": "eager"},
    "gqa_qknorm": {"num_kv_heads": 1, "qk_norm": True},
    "time_window": {"pattern": {"kind": "attnzoo.models.ast.TimeWindow", "steps": 1}},
}


@pytest.mark.parametrize("name", list(ATTENTION))
def test_attention_from_config_trains(name):
    model = tiny(attention=ATTENTION[name], spec_augment={"freq_mask": 4, "time_mask": 8}).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x, y = torch.randn(4, RATE // 2) * 0.1, torch.tensor([0, 1, 2, 3])
    losses = []
    for _ in range(5):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_bf16_autocast_is_finite_and_features_stay_fp32():
    model = tiny().train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        feats = model.features(torch.randn(2, RATE) * 1e-4)
        out = model(torch.randn(2, RATE))
    assert feats.dtype == torch.float32 and torch.isfinite(out).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_weights_in_another_dtype_take_the_fp32_features(dtype):
    """trainer.precision bf16-true / 64-true casts the weights; before, the patch embedding got fp32 features and
    stopped with "Input type (float) and bias type should be the same"."""
    model = tiny().eval()
    audio = torch.randn(2, RATE)
    want = model(audio)
    out = model.to(dtype)(audio)
    assert out.dtype == dtype and torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), want, atol=0.1 if dtype == torch.bfloat16 else 1e-6, rtol=0.1)


def test_normalization_statistics_are_buffers_in_the_state_dict():
    model = tiny(feature_mean=3.5, feature_std=2.0)
    state = model.state_dict()
    assert state["feature_mean"].item() == 3.5 and state["feature_std"].item() == 2.0
    raw = model.logmel(torch.randn(1, RATE))
    torch.testing.assert_close(
        model.eval().features(torch.randn(1, RATE) * 0 + 0), (model.logmel(torch.zeros(1, RATE)) - 3.5) / 2
    )
    assert raw.shape[1] == 32


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"fstride \(20\) and tstride \(10\) must be in \[1, patch_size=16\]"):
        tiny(fstride=20)
    with pytest.raises(ValueError, match=r"8 mel bins \(n_mels; at least 16: data.n_mels\)"):
        tiny(n_mels=8)
    with pytest.raises(ValueError, match="shorter than one 16-frame patch"):
        tiny().eval()(torch.randn(1, RATE // 10))
    with pytest.raises(ValueError, match=r"features kind 'mfcc' is not one of"):
        tiny(features="mfcc")


def test_time_window_reads_nearby_time_steps_and_prefix_tokens_read_all():
    pattern = TimeWindow(steps=1, grid_size=(5, 2), num_prefix_tokens=2)  # 5 time steps x 2 frequency patches
    mask = pattern.dense_mask(12, 12)
    assert mask[:2].all() and mask[:, :2].all()  # cls and distillation tokens
    step = (torch.arange(10) // 2)[:, None]
    torch.testing.assert_close(mask[2:, 2:], (step - step.T).abs() <= 1)
    model = tiny(attention={"pattern": {"kind": "attnzoo.models.ast.TimeWindow", "steps": 1}}).eval()
    assert model(torch.randn(1, 2 * RATE)).shape == (1, 5)  # longer clips: the window still holds


def test_clip_normalization_removes_a_gain_that_dataset_normalization_keeps():
    wave = torch.randn(2, RATE) * torch.linspace(0.1, 1.0, RATE)  # [2, T], not stationary
    louder = 4.0 * wave  # +12 dB: every log-mel bin shifts by the same constant
    clip, dataset = tiny(feature_norm="clip").eval(), tiny(feature_norm="dataset").eval()
    torch.testing.assert_close(clip.features(louder), clip.features(wave), atol=1e-3, rtol=0)
    assert (dataset.features(louder) - dataset.features(wave)).abs().min() > 1.0  # log(16) / std(1) everywhere
    assert clip.features(wave).mean(2).abs().max() < 1e-4  # each clip's bins are centred over time


def test_level_normalization_removes_a_gain_and_keeps_a_steady_spectrum_that_clip_normalization_removes():
    # two steady sounds of other spectra (a low hum, a high hiss): with each bin centred over time (clip) both became
    # the same near-zero features, and a classifier of machine or scene sounds learned nothing (test/acc at chance)
    t = torch.arange(RATE) / RATE
    hum = torch.sin(2 * torch.pi * 200 * t)[None] + 0.01 * torch.randn(1, RATE)
    hiss = torch.randn(1, RATE)
    hiss = torch.fft.irfft(torch.fft.rfft(hiss) * (torch.arange(RATE // 2 + 1) > RATE // 4), n=RATE)  # above 2 kHz
    level, clip = tiny(feature_norm="level").eval(), tiny(feature_norm="clip").eval()
    torch.testing.assert_close(level.features(4.0 * hum), level.features(hum), atol=1e-3, rtol=0)  # +12 dB gone
    assert level.features(hum).mean((1, 2)).abs().max() < 1e-4  # each clip centred as a whole
    apart = (level.features(hum) - level.features(hiss)).mean(2).abs().max()
    assert apart > 1.0 and (clip.features(hum) - clip.features(hiss)).mean(2).abs().max() < 1e-4


@pytest.mark.parametrize("norm", ["level", "clip"])
def test_a_short_clips_padding_leaves_its_level_alone(norm):
    # a 0.3 s tone padded with zeros to 1 s was read 1.04 std higher than the same tone lasting 1 s: the padding's
    # log floor pulled its mean level down, so the level told its length
    t = torch.arange(RATE) / RATE
    noise = torch.randn(1, RATE, generator=torch.Generator().manual_seed(0))
    tone = torch.sin(2 * torch.pi * 1000 * t)[None] * 0.3 + 0.05 * noise  # [1, T]: energy in every bin
    short = tone * (t < 0.3)  # the same tone for 0.3 s, then the zeros a shorter file is padded with
    model = tiny(feature_norm=norm).eval()
    frames = model.logmel.num_frames(int(0.25 * RATE))  # frames inside the tone in both
    apart = (model.features(short)[..., :frames] - model.features(tone)[..., :frames]).abs().mean()
    assert apart < 0.2, apart  # the noise of 0.3 s against 1 s; the padding moved every feature by ~25 (std 1)
    silence = model.features(torch.zeros(1, RATE))  # silence alone: its own level, no division by zero frames
    assert torch.isfinite(silence).all() and silence.abs().max() < 1e-4


@pytest.mark.parametrize("global_pool", ["token", "avg"])
def test_pooling_choices_train(global_pool):
    model = tiny(global_pool=global_pool).train()
    logits = model(torch.randn(3, RATE))
    assert logits.shape == (3, 5)
    logits.sum().backward()
    assert model.patch_embed.weight.grad.abs().sum() > 0
    pooled_norm = model.encoder.norm if global_pool == "token" else model.fc_norm  # norm before the head
    assert pooled_norm.weight.grad.abs().sum() > 0
    assert isinstance(model.encoder.norm, torch.nn.Identity) == (global_pool == "avg")  # one norm, not two


@pytest.mark.parametrize(("key", "value"), [("global_pool", "max"), ("feature_norm", "utterance")])
def test_bad_pooling_or_normalization_is_refused(key, value):
    with pytest.raises(ValueError, match=f"{key} must be"):
        tiny(**{key: value})

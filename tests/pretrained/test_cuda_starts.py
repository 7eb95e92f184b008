"""Pretrained starts on a GPU: every converted family (BERT, GPT-2, BART, Hugging Face ViT, AST) gives the outputs of
the `transformers` model on the same GPU through each attention backend (fp32 within 1e-4; bf16 autocast close to
fp32 and finite where rows are padded), greedy decoding there equals `generate`, and every recipe fine-tunes from
such a folder on the GPU in mixed precision."""

import csv
import json
import math

import pytest
import torch
import transformers

from attnzoo.config import load
from attnzoo.generation import greedy
from attnzoo.models import MODELS
from attnzoo.pretrained import convert
from attnzoo.run import fit
from tests.helpers import QUICK, ROOT, SMOKE_STEPS, smoke_overrides
from tests.helpers.hf import save_ast, save_bart, save_encoder, save_gpt2, save_vit

pytestmark = pytest.mark.cuda

TEXTS = ["The for statement is used to iterate over the elements of a sequence."] * 20
# head dimension 16, the smallest FlexAttention compiles for, so that `flex` runs its own kernel
WIDE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128}
HF_CLASSES = {
    "bert": transformers.BertForSequenceClassification,
    "vit": transformers.ViTForImageClassification,
    "ast": transformers.ASTForAudioClassification,
    "gpt2": transformers.GPT2LMHeadModel,
    "bart": transformers.BartForConditionalGeneration,
}
SAVE = {
    "bert": lambda p: save_encoder("bert", p, classes=3, sizes=WIDE),
    "vit": lambda p: save_vit(p, sizes=WIDE),
    "ast": lambda p: save_ast(p, mel_bins=32, sizes=WIDE),
    "gpt2": lambda p: save_gpt2(p, TEXTS, n_embd=64, tie_word_embeddings=False),  # tied: greedy repeats a token
    # drawn far from its initialization already; untied at a smaller scale, greedy decoding does not repeat one token
    "bart": lambda p: save_bart(
        p, TEXTS, d_model=64, encoder_ffn_dim=128, decoder_ffn_dim=128, std=0.1, tie_word_embeddings=False
    ),  # fmt: skip
}
DEVICE = "cuda"


@pytest.fixture(autouse=True)
def _exact_fp32_matmuls():
    """TF32 off for matrix products and convolutions (patch embeddings): fp32 means fp32 in the comparisons."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def _saved(family: str, path):
    """The family's random `transformers` model saved in `path` with weights far from their initialization (LayerNorm
    scales around 1; BART's saver draws them so already), so that outputs are far from uniform; in eval mode."""
    SAVE[family](path)
    hf = HF_CLASSES[family].from_pretrained(path, attn_implementation="eager")
    if family == "bart":
        return hf.eval()
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            scale = p.dim() == 1 and ("norm" in name.lower() or ".ln_" in name) and name.endswith("weight")
            p.normal_(1.0 if scale else 0.0, 0.2)
    hf.save_pretrained(path)
    return hf.eval()


def _pair(family: str, path, backend: str, device: str):
    """(HF model, attnzoo model converted from the same folder with `backend`, hf_call, our_call) on `device`: the
    calls run a model of each kind on the same inputs (padded rows for BERT and BART) and return its logits."""
    hf = _saved(family, path).to(device)
    c = convert(path)
    parts = [k for k in ("attention", "cross_attention") if k in c.options]
    chosen = {"backend": backend, **({"attn_drop": 0.0} if backend == "flex" else {})}  # flex has no dropout
    ours = MODELS[c.model_kind](**{**c.options, **{k: {**c.options[k], **chosen} for k in parts}})
    ours.load_state_dict(c.state_dict)  # strict
    ours = ours.to(device).eval()
    g = torch.Generator().manual_seed(1)
    lengths = torch.tensor([12, 7, 3])
    padding = (torch.arange(12)[None] >= lengths[:, None]).to(device)  # [3, 12], True = pad
    if family == "bert":  # [CLS] (id 2) first, then words (ids past the specials), [PAD] (id 0) after
        ids = torch.randint(5, 60, (3, 12), generator=g).to(device)
        ids[:, 0] = 2
        ids = ids.masked_fill(padding, 0)
        mask = (~padding).long()
        return hf, ours, (lambda m: m(input_ids=ids, attention_mask=mask).logits), lambda m: m(ids, padding)
    if family == "gpt2":  # causal: no padding (right padding is checked on the CPU)
        ids = torch.randint(0, hf.config.vocab_size, (3, 12), generator=g).to(device)
        return hf, ours, (lambda m: m(ids).logits), lambda m: m(ids)
    if family == "bart":
        src = torch.randint(5, hf.config.vocab_size, (3, 12), generator=g).to(device).masked_fill(padding, 1)
        tgt = torch.randint(5, hf.config.vocab_size, (3, 7), generator=g).to(device)
        tgt[:, 0] = 0
        want = lambda m: m(input_ids=src, attention_mask=(~padding).long(), decoder_input_ids=tgt).logits  # noqa: E731
        return hf, ours, want, lambda m: m(src, tgt, padding)
    if family == "vit":
        x = torch.randn(2, 3, 32, 32, generator=g).to(device)
        return hf, ours, (lambda m: m(x).logits), lambda m: m(x)
    x = torch.randn(2, 64, 32, generator=g).to(device)  # AST input_values [B, frames, mel bins]
    return hf, ours, (lambda m: m(x).logits), lambda m: m.from_features(x.transpose(1, 2))


@pytest.mark.parametrize("backend", ["eager", "sdpa", "flex"])
@pytest.mark.parametrize("family", list(SAVE))
def test_converted_models_give_the_transformers_outputs_on_a_gpu(family, backend, tmp_path):
    hf, ours, hf_call, our_call = _pair(family, tmp_path, backend, DEVICE)
    with torch.no_grad():
        want = hf_call(hf)
        got = our_call(ours)
    assert want.abs().max() > 1.0  # far from uniform: a misplaced tensor or a wrong mask would show
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)
    with torch.no_grad(), torch.autocast(DEVICE, dtype=torch.bfloat16):
        half = our_call(ours).float()
    assert half.isfinite().all(), f"{family} through {backend} in bf16: non-finite outputs"
    error = ((half - want).norm() / want.norm()).item()
    assert error < 0.05, f"{family} through {backend}: bf16 autocast is {error:.3f} (relative L2) from fp32"


def test_greedy_decoding_on_a_gpu_equals_generate(tmp_path):
    """A converted GPT-2 and BART decode greedily on the GPU with the KV cache, token for token as `generate` does
    there (fp32)."""
    for family in ("gpt2", "bart"):
        hf, ours, _, _ = _pair(family, tmp_path / family, "sdpa", DEVICE)
        eos = hf.config.eos_token_id
        g = torch.Generator().manual_seed(2)
        prompt = torch.randint(5, hf.config.vocab_size, (2, 6), generator=g).to(DEVICE)
        common = dict(max_new_tokens=10, do_sample=False, num_beams=1, eos_token_id=eos, min_length=0)
        with torch.no_grad():
            if family == "gpt2":
                want = hf.generate(prompt, attention_mask=torch.ones_like(prompt), pad_token_id=eos, **common)[:, 6:]
                got = greedy(ours, prompt=prompt, eos_id=eos, pad_id=eos, max_new_tokens=10)
            else:
                want = hf.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), decoder_start_token_id=0,
                                   no_repeat_ngram_size=0, repetition_penalty=1.0, forced_bos_token_id=None,
                                   forced_eos_token_id=None, pad_token_id=1, **common)[:, 1:]  # fmt: skip
                got = greedy(ours, src=prompt, src_padding_mask=prompt == -1, bos_id=0, eos_id=eos, pad_id=1,
                             max_new_tokens=10)  # fmt: skip
        assert got.device.type == DEVICE and len(set(got.flatten().tolist())) > 2, (family, got)
        assert torch.equal(got, want[:, : got.shape[1]]), (family, got, want)


FIT_SAVERS = {
    "vit": save_vit,
    "ast": save_ast,
    "lm": lambda p: save_gpt2(p, TEXTS),
    "text_cls": lambda p: save_encoder("bert", p),
    "translation": lambda p: save_bart(p, TEXTS),
}
GPU = ("trainer.accelerator=gpu", "trainer.devices=1", "trainer.precision=auto")


@pytest.mark.parametrize("recipe", list(FIT_SAVERS))
def test_each_recipe_fine_tunes_a_pretrained_start_on_a_gpu(recipe, tmp_path):
    source = tmp_path / "weights"
    FIT_SAVERS[recipe](source)
    path = ROOT / "recipes" / f"{recipe}.yaml"
    overrides = smoke_overrides(load([path]), started=True)
    cfg = load([path], [*overrides, *QUICK, *SMOKE_STEPS, "run.baseline=false", f"run.dir={tmp_path / 'run'}",
                        f"model.init_from={source}", *GPU])  # fmt: skip
    run_dir = fit(cfg)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["global_step"] == 2 and summary["attention_backends"]
    saved = load([run_dir / "config.yaml"])
    assert saved.section("trainer")["precision"] == ("bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed")
    assert saved.section("task")["optimizer"]["lr"] == 5e-5  # the fine-tuning rate
    with open(run_dir / "metrics.csv", newline="") as f:
        losses = [float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")]
    assert losses and all(math.isfinite(x) for x in losses)
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    weights = [t for t in ckpt["state_dict"].values() if t.is_floating_point()]
    assert ckpt["global_step"] == 2 and all(t.isfinite().all() for t in weights)

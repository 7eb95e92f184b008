"""`attnzoo.translate` and `attnzoo.generate` on tiny saved runs; `load_run` reuses the run's tokenizer; viz draws
the cross-attention alignment of a translation."""

from pathlib import Path

import pytest
import torch

from attnzoo.config import load
from attnzoo.data.tokenizers.subword import SubwordTokenizer
from attnzoo.generate import generate
from attnzoo.generate import main as generate_main
from attnzoo.generation import beam_search, greedy
from attnzoo.run import build, load_run
from attnzoo.translate import main as translate_main
from attnzoo.translate import source_batch, translate
from attnzoo.viz import main as viz_main
from tests.helpers import smoke_overrides

ROOT = Path(__file__).resolve().parent.parent
PINNED = ["trainer.precision=32-true", "trainer.accelerator=cpu"]


def _saved_run(path: Path, recipe: str) -> Path:
    """A run directory as `attnzoo fit` writes it (config, tokenizer.json, checkpoints/best.ckpt), untrained."""
    cfg = load([ROOT / "recipes" / recipe])
    cfg = load([ROOT / "recipes" / recipe], [*smoke_overrides(cfg), *PINNED])
    data, task, cfg = build(cfg)
    (path / "config.yaml").write_text(cfg.to_yaml())
    data.save_artifacts(path)
    (path / "checkpoints").mkdir()
    torch.save({"state_dict": task.state_dict()}, path / "checkpoints" / "best.ckpt")
    return path


@pytest.fixture(scope="module")
def translation_run(tmp_path_factory) -> Path:
    return _saved_run(tmp_path_factory.mktemp("translation"), "translation.yaml")


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory) -> Path:
    return _saved_run(tmp_path_factory.mktemp("lm"), "lm.yaml")


def test_load_run_reuses_the_saved_tokenizer(translation_run):
    run = load_run(translation_run)
    saved = str(translation_run / "tokenizer.json")
    assert run.cfg.section("data")["tokenizer"] == saved and run.data.tokenizer.name == saved
    assert run.data.tokenizer.to_str() == SubwordTokenizer.load(saved).to_str()


def test_load_run_without_a_saved_tokenizer_learns_it_again(tmp_path, translation_run):
    for name in ("config.yaml", "checkpoints"):
        (tmp_path / name).symlink_to(translation_run / name)
    run = load_run(tmp_path)
    assert run.cfg.section("data")["tokenizer"] == "bpe" and run.data.tokenizer.name == "bpe"


def test_translate_decodes_what_greedy_and_beam_search_generate(translation_run):
    texts = ["The meeting is on 3 March.", "42 kilometres"]
    run = load_run(translation_run)
    net, tok = run.net.eval(), run.data.tokenizer
    src, mask = source_batch(run.data, texts)
    ids = dict(bos_id=tok.bos_id, eos_id=tok.eos_id, pad_id=tok.pad_id, max_new_tokens=run.task.max_new_tokens)
    expected = [run.data.decode(r) for r in greedy(net, src=src, src_padding_mask=mask, **ids)]
    assert translate(translation_run, texts, beam=1) == expected
    beam = beam_search(net, src=src, src_padding_mask=mask, beam_size=3, **ids).tokens
    assert translate(translation_run, texts, beam=3) == [run.data.decode(r) for r in beam]


def test_translate_command_prints_one_line_per_sentence_and_refuses_lm_runs(translation_run, lm_run, capsys):
    assert translate_main([str(translation_run), "--text", "5 May 2021", "--text", "twelve", "--beam", "2"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert translate_main([str(lm_run), "--text", "x"]) == 2
    assert "use python -m attnzoo.generate" in capsys.readouterr().err


def test_generate_continues_the_prompt_greedily_and_refuses_translation_runs(lm_run, translation_run, capsys):
    run = load_run(lm_run)
    prompt = torch.tensor([run.data.encode_prompt("The")])
    new = greedy(run.net.eval(), prompt=prompt, eos_id=run.data.tokenizer.eos_id, max_new_tokens=6)
    expected = run.data.decode(torch.cat([prompt[0], new[0]]))
    assert generate(lm_run, "The", max_new_tokens=6, temperature=0.0) == expected
    sampled = [generate(lm_run, "The", max_new_tokens=6, temperature=1.0, top_k=5, seed=s) for s in (0, 0, 1)]
    assert sampled[0] == sampled[1]  # the seed fixes the draw
    assert generate_main([str(lm_run), "--prompt", "The", "--max-new-tokens", "4", "--top-p", "0.9"]) == 0
    assert capsys.readouterr().out.strip()
    assert generate_main([str(translation_run), "--prompt", "x"]) == 2
    assert "use python -m attnzoo.translate" in capsys.readouterr().err


def test_viz_draws_the_cross_attention_alignment_of_a_translation(translation_run, tmp_path):
    assert viz_main([str(translation_run), "--text", "The meeting is on 3 March.", "--out", str(tmp_path)]) == 0
    png = tmp_path / "alignment.png"
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = torch.load(tmp_path / "maps.pt")
    layers = load([translation_run / "config.yaml"]).section("model")["decoder_depth"]
    assert len(saved["cross_attention"]) == layers
    for m in saved["cross_attention"]:  # [H, T, S]: each generated token's weights over the source sum to 1
        assert m.shape[1:] == (len(saved["target"]), len(saved["source"]))
        torch.testing.assert_close(m.sum(-1), torch.ones(m.shape[:2]))

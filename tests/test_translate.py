"""`attnzoo.translate` and `attnzoo.generate` on tiny saved runs; `load_run` reuses the run's tokenizer; viz draws
the cross-attention alignment of a translation."""

import json
import logging
import re
import shutil
from pathlib import Path

import pytest
import torch

from attnzoo.config import ConfigError, load
from attnzoo.data.tokenizers.subword import SubwordTokenizer, decode_generated
from attnzoo.generate import generate
from attnzoo.generate import main as generate_main
from attnzoo.generation import beam_search, greedy
from attnzoo.run import build, fit, load_run
from attnzoo.run.rundir import saved_kind
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


@pytest.mark.parametrize("with_data", [True, False])
def test_load_run_without_a_saved_tokenizer_is_an_error_not_a_tokenizer_learned_again(
    tmp_path, translation_run, with_data
):
    for name in ("config.yaml", "checkpoints"):
        (tmp_path / name).symlink_to(translation_run / name)
    with pytest.raises(ConfigError, match="no tokenizer.json.*learned from its training data.*copy the run's own"):
        load_run(tmp_path, with_data=with_data)


def test_evaluate_puts_a_translation_runs_examples_in_its_report_and_writes_nothing_else(
    translation_run, tmp_path, monkeypatch
):
    import shutil

    from attnzoo.evaluate import evaluate

    run = shutil.copytree(translation_run, tmp_path / "run")
    for name in ("examples.txt", "examples.json"):  # what training wrote: it stays
        (run / name).write_text("{}" if name.endswith("json") else "from training")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")  # before: examples.txt / examples.json landed in the working directory
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    report = evaluate(run, "best", "test", [], [])
    assert report["examples"]["test"] and set(report["examples"]["test"][0]) == {"src", "ref", "hyp"}
    assert list((tmp_path / "cwd").iterdir()) == []
    after = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    assert set(after) - set(before) == {"evaluate-best.json"} and all(after[k] == v for k, v in before.items())


def test_translate_decodes_what_greedy_and_beam_search_generate(translation_run):
    texts = ["The meeting is on 3 March.", "42 kilometres"]
    run = load_run(translation_run)
    net, tok = run.net.eval(), run.data.tokenizer
    src, mask, _ = source_batch(tok, texts, run.data.max_len)
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


def _nan_weights(run: Path, dest: Path) -> Path:
    """A copy of `run` whose best.ckpt holds NaN in every floating-point weight (a run that diverged)."""
    shutil.copytree(run, dest)
    ckpt = dest / "checkpoints" / "best.ckpt"
    saved = torch.load(ckpt, weights_only=True)
    nan = {k: v.float().fill_(float("nan")) if v.is_floating_point() else v for k, v in saved["state_dict"].items()}
    torch.save({**saved, "state_dict": nan}, ckpt)
    return dest


def test_a_checkpoint_of_nan_weights_is_named_by_translate_generate_and_evaluate(
    translation_run, lm_run, tmp_path, capsys
):
    # generate stopped in torch.multinomial's raw RuntimeError, translate --beam 2 in an IndexError, translate and
    # generate --temperature 0 printed the tokens greedy chose from NaN scores, evaluate a raw traceback
    from attnzoo.evaluate import main as evaluate_main

    said = "the model's next-token scores are NaN or infinite, so no token can be chosen: the checkpoint's weights"
    translation = _nan_weights(translation_run, tmp_path / "translation")
    for beam in ("1", "2"):
        assert translate_main([str(translation), "--text", "twelve", "--beam", beam]) == 1  # as evaluate and fit
        assert said in capsys.readouterr().err
    assert evaluate_main([str(translation)]) == 1
    assert said in capsys.readouterr().err
    lm = _nan_weights(lm_run, tmp_path / "lm")
    for temperature in ("1.0", "0"):
        assert generate_main([str(lm), "--prompt", "The", "--max-new-tokens", "2", "--temperature", temperature]) == 1
        assert said in capsys.readouterr().err


def test_a_beam_wider_than_the_vocabulary_is_refused(translation_run, capsys, tmp_path):
    # --beam 100000 with a 500-token vocabulary ran for minutes on one sentence, gigabytes growing
    vocab = load_run(translation_run).tokenizer.vocab_size
    assert translate_main([str(translation_run), "--text", "twelve", "--beam", str(vocab + 1)]) == 2
    err = capsys.readouterr().err
    assert f"--beam ({vocab + 1}) is more than the model's vocabulary ({vocab} tokens)" in err, err
    assert translate_main([str(translation_run), "--text", "twelve", "--beam", str(vocab)]) == 0
    # task.beam_size past the vocabulary: fit trained and tested with it, then translate named a --beam not given
    cfg = load([ROOT / "recipes" / "translation.yaml"])
    wide = [*smoke_overrides(cfg), *PINNED, f"task.beam_size={vocab + 1}"]
    with pytest.raises(ConfigError, match=rf"task.beam_size \({vocab + 1}\) is more than the model's vocabulary"):
        fit(load([ROOT / "recipes" / "translation.yaml"], wide), run_dir=tmp_path / "wide")
    assert not (tmp_path / "wide").exists()  # refused before the run directory was written
    # a run saved with it (before fit refused it) still loads: its own beam is named, --beam chooses another
    saved = tmp_path / "saved"
    shutil.copytree(translation_run, saved)
    config = (saved / "config.yaml").read_text()
    (saved / "config.yaml").write_text(re.sub(r"beam_size: \d+", f"beam_size: {vocab + 1}", config))
    assert translate_main([str(saved), "--text", "twelve"]) == 2
    assert f"the run's task.beam_size ({vocab + 1}; --beam N) is more than" in capsys.readouterr().err
    assert translate_main([str(saved), "--text", "twelve", "--beam", "2"]) == 0


def test_a_data_option_that_would_resize_the_trained_model_is_named(translation_run, lm_run, capsys):
    # translate <run> data.max_len=1000 read no data, and the message said "this is not the data the run was trained
    # on ... give it the data it was trained on"
    length = load_run(translation_run).cfg.section("model")["max_len"]
    assert translate_main([str(translation_run), "--text", "twelve", f"data.max_len={length + 7}"]) == 2
    err = capsys.readouterr().err
    assert f"model.max_len: the run's {translation_run / 'config.yaml'} records {length}, and " in err, err
    named = f"data.max_len={length + 7} (the command line) makes it {length + 7}: the trained model's model.max_len"
    assert named + " is fixed; leave data.max_len out" in err and "not the data the run was trained on" not in err, err
    block = load_run(lm_run).cfg.section("model")["max_len"] * 2
    assert generate_main([str(lm_run), "--prompt", "x", f"data.block_size={block}"]) == 2
    assert "leave data.block_size out" in capsys.readouterr().err


def test_translate_and_generate_name_the_commands_for_a_classifiers_run(tmp_path, capsys):
    """A ListOps classifier's run has no tokenizer.json (its words are fixed): the kind is named, not the file."""
    run = _saved_run(tmp_path, "text_cls.yaml")
    for main, args in ((translate_main, ["--text", "x"]), (generate_main, ["--prompt", "x"])):
        assert main([str(run), *args]) == 2
        err = capsys.readouterr().err
        assert "is a 'text' run" in err and "use python -m attnzoo.evaluate" in err and "tokenizer.json" not in err


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


def test_viz_of_a_text_and_of_the_first_pair_go_to_their_own_folders_and_a_cut_is_named(
    translation_run, caplog, capsys
):
    long = "The meeting is on 3 March. " * 40
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        assert viz_main([str(translation_run), "--text", long]) == 0
    assert "viz: --text has" in caplog.text and "(data.max_len)" in caplog.text
    assert viz_main([str(translation_run)]) == 0  # --index 0: the first validation pair
    assert (translation_run / "viz" / "text" / "alignment.png").is_file()
    assert (translation_run / "viz" / "val-0" / "alignment.png").is_file()
    assert viz_main([str(translation_run), "--index", "-1"]) == 2  # the valid indices are named
    size = len(load_run(translation_run).data.pairs["val"])
    assert f"--index -1: the val split has {size} pairs (valid: 0-{size - 1})" in capsys.readouterr().err


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
    # the translation drawn is the one `translate` gives (the run's beam; viz decoded greedily)
    assert saved["translation"] == translate(translation_run, ["The meeting is on 3 March."])[0]


# ---------------------------------------------------------------------------------------------- the run dir alone

QUICK = [*PINNED, "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false", "trainer.devices=1"]
STEPS = ["trainer.max_steps=2", "trainer.limit_val_batches=1", "trainer.num_sanity_val_steps=0", "run.test=false"]


WORDS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
GERMAN = ["eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun", "zehn"]


def _fit_on_tsv(root: Path) -> Path:
    """A tiny translation run (2 steps) fitted on `root/train.tsv`: number words to German, two words a line."""
    from attnzoo.run import fit

    train = root / "train.tsv"
    pairs = list(zip(WORDS, GERMAN, strict=True))
    train.write_text("".join(f"{a} {b}\t{c} {d}\n" for a, c in pairs for b, d in pairs))
    recipe = ROOT / "recipes" / "translation.yaml"
    sizes = ["data.num_train=null", "data.num_val=null", "data.num_test=null", "data.max_len=8"]
    overrides = [*smoke_overrides(load([recipe])), *QUICK, *STEPS, *sizes, f"data.train={train}", f"run.dir={root}"]
    return fit(load([recipe], overrides))


@pytest.fixture(scope="module")
def fitted_translation(tmp_path_factory) -> Path:
    """A translation run fitted on a TSV file that is deleted afterwards (as if the run dir were copied elsewhere)."""
    root = tmp_path_factory.mktemp("fitted")
    run_dir = _fit_on_tsv(root)
    (root / "train.tsv").unlink()
    return run_dir


def test_a_resume_whose_training_file_changed_refuses_the_tokenizer_learned_again(tmp_path):
    from attnzoo.run import fit

    run_dir = _fit_on_tsv(tmp_path)
    train = tmp_path / "train.tsv"
    train.write_text(train.read_text().upper())  # the data changed since
    with pytest.raises(ConfigError, match=r"since it was trained: data\.train: .* \(the same size, other content"):
        fit(load([run_dir / "config.yaml"]), resume=run_dir)  # named from its fingerprint, before it is read
    (run_dir / "data_files.json").unlink()  # a run that recorded none: the tokenizer learned again tells
    with pytest.raises(ConfigError, match="is not the one .* trained with .*the training data it is learned from"):
        fit(load([run_dir / "config.yaml"]), resume=run_dir)


def test_a_resume_given_another_training_file_names_the_key_before_reading_it(tmp_path):
    # the other file's vocabulary was learned first, and the refusal named model.vocab_size, not data.train
    from attnzoo.run import fit

    run_dir = _fit_on_tsv(tmp_path)
    other = tmp_path / "other.tsv"
    other.write_text("".join(f"{w} {w} {w}\tx{w} y\n" for w in WORDS * 3))  # other words: another vocabulary
    with pytest.raises(ConfigError, match=r"in what defines the run: data.train: '.*train.tsv' -> '.*other.tsv'"):
        fit(load([run_dir / "config.yaml"], [f"data.train={other}"]), resume=run_dir)


def test_checkpoints_record_the_digest_of_the_tokenizer(fitted_translation):
    from attnzoo.data.tokenizers.subword import tokenizer_digest
    from attnzoo.run.checkpoint_io import read_checkpoint
    from attnzoo.run.tokenizer_stamp import STAMP_KEY

    stamp = read_checkpoint(fitted_translation / "checkpoints" / "last.ckpt")[STAMP_KEY]
    assert stamp == tokenizer_digest(SubwordTokenizer.load(fitted_translation / "tokenizer.json"))


def test_translate_needs_only_the_run_dir_once_the_training_file_is_gone(fitted_translation, capsys):
    assert "train.tsv" in (fitted_translation / "config.yaml").read_text()
    with pytest.raises(ConfigError, match="train.tsv"):  # the data cannot be built any more...
        load_run(fitted_translation, "last")
    out = translate(fitted_translation, ["three four", "ten one"], checkpoint="last")  # ...the model can
    assert len(out) == 2
    assert translate_main([str(fitted_translation), "--checkpoint", "last", "--text", "three four"]) == 0
    assert capsys.readouterr().out.splitlines() == out[:1]


def test_another_runs_tokenizer_is_refused(tmp_path, translation_run):
    for name in ("config.yaml", "checkpoints", "translation.json"):
        (tmp_path / name).symlink_to(translation_run / name)
    own = SubwordTokenizer.load(translation_run / "tokenizer.json")
    other = SubwordTokenizer.train(["ein anderer Text", "other words here"] * 20, vocab_size=own.vocab_size)
    other.save(tmp_path / "tokenizer.json")
    for with_data in (True, False):
        with pytest.raises(ConfigError, match="is not the one .* was trained with .*another run's"):
            load_run(tmp_path, with_data=with_data)


def test_translate_file_keeps_line_alignment_strips_a_bom_and_says_what_it_cut(translation_run, tmp_path, capsys):
    lines = ["The meeting is on 3 March.", "", "42 kilometres", "   ", "twelve " * 70, "", "5 May 2021"]
    path = tmp_path / "in.txt"
    path.write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode() + b"\n\n")  # a BOM; a blank last line
    args = [str(translation_run), "--file", str(path), "--batch-size", "2", "--beam", "1"]
    assert translate_main(args) == 0
    captured = capsys.readouterr()
    out = captured.out.split("\n")
    assert out[-1] == "" and len(out[:-1]) == len(lines) + 1  # one output line per input line
    full = [i for i, line in enumerate(lines) if line.strip()]
    assert [i for i, line in enumerate(out[:-1]) if not line] == [i for i in range(len(lines) + 1) if i not in full]
    expected = translate(translation_run, [lines[i] for i in full], beam=1)
    assert [out[i] for i in full] == expected  # the BOM did not reach the first sentence: same as --text
    assert "--file line 5 has" in captured.err and "cut to the model's 64 (data.max_len)" in captured.err
    assert f"{len(lines) + 1} lines translated; 1 cut to 64 tokens" in captured.err


def test_translate_piped_into_a_reader_that_stops_ends_quietly(translation_run, tmp_path):
    """`translate --file big.txt | head -1` ended with a BrokenPipeError traceback and exit status 1."""
    import os
    import subprocess
    import sys

    path = tmp_path / "in.txt"
    path.write_text("42 kilometres\n" * 400)
    command = [sys.executable, "-m", "attnzoo.translate", str(translation_run), "--file", str(path), "--beam", "1",
               "--batch-size", "1"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    first = proc.stdout.readline()
    proc.stdout.close()  # as `head -1` does
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 0 and first.strip(), err[-2000:]
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_generate_piped_into_a_reader_that_stopped_ends_quietly(lm_run):
    # `generate ... | true`: a BrokenPipeError traceback from print, exit status 1
    import os
    import subprocess
    import sys

    command = [sys.executable, "-m", "attnzoo.generate", str(lm_run), "--prompt", "The", "--max-new-tokens", "4"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    proc.stdout.close()  # as `true` does: gone before the text is printed
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 0, err[-2000:]
    assert "Traceback" not in err and "BrokenPipe" not in err


@pytest.mark.parametrize(
    ("raw", "line", "what"),
    [(b"ok\nPreis: 5\xa4\n", 2, "not UTF-8"), (b"ok\n\x00\x00\x00\x0dIHDR\x00", 2, "binary file")],
    ids=["latin-1", "binary"],
)
def test_translate_file_in_another_encoding_is_a_clear_error_naming_the_line(
    fitted_translation, tmp_path, capsys, raw, line, what
):
    path = tmp_path / "in.txt"
    path.write_bytes(raw)
    assert translate_main([str(fitted_translation), "--checkpoint", "last", "--file", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    assert f"--file {path} line {line}" in captured.err and what in captured.err


def test_special_token_strings_in_user_text_are_plain_text(translation_run):
    from attnzoo.data.tokenizers.subword import encode_user_text

    tok = SubwordTokenizer.load(translation_run / "tokenizer.json")
    specials = {tok.pad_id, tok.bos_id, tok.eos_id, tok.cls_id}
    assert specials & set(tok.encode("one [EOS] two [PAD]"))  # what the tokenizer does to training text
    ids = encode_user_text(tok, "one [EOS] two [PAD] [BOS] [CLS]")
    assert not specials & set(ids)
    assert tok.encode("one [EOS]") != encode_user_text(tok, "one [EOS]")
    assert tok.encode("one") == encode_user_text(tok, "one")  # the setting does not stick


@pytest.mark.parametrize("kind", ["unigram", "wordpiece"])
def test_special_token_strings_never_read_as_specials_from_a_vocabulary_that_holds_them_as_pieces(kind):
    """A unigram or wordpiece vocabulary holds "[EOS]" as a piece of its model too: typed "[EOS]" became the
    end-of-sequence id even with the added tokens turned into text."""
    from attnzoo.data.tokenizers.subword import encode_user_text

    tok = SubwordTokenizer.train(["one two three", "four five six"] * 20, kind=kind, vocab_size=80)
    specials = {tok.pad_id, tok.bos_id, tok.eos_id, tok.cls_id}
    unknown = []
    ids = encode_user_text(tok, "one [EOS] two [PAD]", unknown)
    assert not specials & set(ids) and ids.count(tok.unk_id) == 2
    assert [u.strip() for u in unknown] == ["[EOS]", "[PAD]"]  # named in the warning


def test_a_tokenizer_files_template_tokens_stay_and_typed_ones_do_not(tmp_path):
    """A word-level file with [SEP] in its vocabulary and text split on whitespace alone: a typed [SEP] was the
    separator id; with no unknown token in the file it is left out (and named), never a special id."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    from attnzoo.data.tokenizers.subword import encode_user_text
    from attnzoo.data.tokenizers.tokenize import FileTokenizer

    for unk in ("[UNK]", None):
        names = ["[PAD]", "[CLS]", "[SEP]", "hello", "world", *([unk] if unk else [])]
        raw = Tokenizer(models.WordLevel({n: i for i, n in enumerate(names)}, unk_token=unk))
        raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        raw.add_special_tokens([n for n in names if n.startswith("[")])
        marks = [("[CLS]", 1), ("[SEP]", 2)]
        raw.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=marks)
        raw.save(str(tmp_path / "tokenizer.json"))
        tok = FileTokenizer(path=tmp_path / "tokenizer.json")
        unknown = []
        ids = encode_user_text(tok, "hello [SEP] world", unknown)
        middle = [names.index("[UNK]")] if unk else []
        assert ids == [1, 3, *middle, 4, 2], unk  # the template's [CLS] and [SEP] alone
        assert unknown == ["[SEP]"]


def test_generate_says_when_it_caps_max_new_tokens(lm_run, caplog):
    block = load([lm_run / "config.yaml"]).section("data")["block_size"]
    with caplog.at_level("WARNING", logger="attnzoo"):
        generate(lm_run, "The", max_new_tokens=block - 4, temperature=0.0)
        assert "capped" not in caplog.text
        generate(lm_run, "The", max_new_tokens=10_000, temperature=0.0)
    assert "--max-new-tokens 10000 capped to" in caplog.text and f"at most {block} tokens" in caplog.text
    with pytest.raises(ConfigError, match="--prompt has .* tokens"):
        generate(lm_run, "word " * block, max_new_tokens=2)


def test_generate_reads_a_prompt_as_long_as_the_context_and_strips_it_as_training_does(lm_run, caplog):
    # a prompt of bos + block - 1 tokens fills the context and still predicts one token (it was refused); a
    # trailing space was a token of its own that training never saw before a word, and derailed the continuation
    run = load_run(lm_run, "best", with_data=False)
    block, tok = run.task.max_len, run.tokenizer
    words = ("The " * block).split()
    while len(tok.encode(" ".join(words))) > block - 1:
        words.pop()
    prompt = " ".join(words)
    assert len(tok.encode(prompt)) == block - 1  # "The" is one token
    with caplog.at_level("WARNING", logger="attnzoo"):
        out = generate(lm_run, prompt, max_new_tokens=3, temperature=0.0)
    assert "--max-new-tokens 3 capped to 1" in caplog.text
    # 1 + block tokens: the arithmetic is said (it read as an off-by-one)
    assert f"the prompt takes {block} (bos included); the last new token is never read back, so prompt and new " \
           f"tokens come to {block} + 1" in caplog.text  # fmt: skip
    ids = torch.tensor([[tok.bos_id, *tok.encode(prompt)]])
    with torch.no_grad():
        expected = decode_generated(tok, [*ids[0].tolist(), int(run.task.eval()(ids)[0, -1].argmax())])
    assert out == expected
    assert (
        generate(lm_run, "The ", max_new_tokens=4, temperature=0.0)
        == generate(lm_run, " The", max_new_tokens=4, temperature=0.0)
        == generate(lm_run, "The", max_new_tokens=4, temperature=0.0)
    )


def test_viz_refuses_a_text_for_a_language_model_before_reading_its_data(lm_run, tmp_path, capsys):
    # a language model run whose training file had moved answered --text with "data.train: no such file"; with the
    # file there, with what viz takes
    import shutil

    run = tmp_path / "moved"
    shutil.copytree(lm_run, run)
    text = (run / "config.yaml").read_text().replace("  train: null\n", f"  train: {tmp_path / 'gone.txt'}\n")
    (run / "config.yaml").write_text(text)
    assert "gone.txt" in text
    said = {"--text": "--text: for runs with data kind 'text' or 'translation' (this run: 'lm')",
            "--input": "--input: runs with data kind 'lm' take no input files"}  # fmt: skip
    for args in (["--text", "The"], ["--input", str(tmp_path / "x.png")]):
        assert viz_main([str(run), *args, "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert said[args[0]] in err and "gone.txt" not in err, err


def test_viz_draws_a_validation_example_of_a_language_model(lm_run, tmp_path, capsys):
    assert viz_main([str(lm_run), "--index", "0", "--out", str(tmp_path)]) == 0, capsys.readouterr().err
    saved = torch.load(tmp_path / "maps.pt")
    block = load([lm_run / "config.yaml"]).section("data")["block_size"]
    assert saved["maps"][0].shape[-2:] == (block, block)
    assert (tmp_path / "attention_matrices.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_characters_the_tokenizer_never_saw_are_named_not_dropped_silently(
    lm_run, translation_run, tmp_path, caplog, capsys
):
    from attnzoo.data.tokenizers.subword import encode_user_text

    tok = SubwordTokenizer.load(translation_run / "tokenizer.json")
    unknown: list[str] = []
    assert encode_user_text(tok, "one ☃ two ☃", unknown) == tok.encode("one ☃ two ☃")
    assert tok.unk_id in tok.encode("☃") and unknown == ["☃", "☃"]
    with caplog.at_level("WARNING", logger="attnzoo"):
        generate(lm_run, "The", max_new_tokens=2, temperature=0.0)
        assert "never saw" not in caplog.text
        generate(lm_run, "The ☃ and ⛄", max_new_tokens=2, temperature=0.0)
    assert "--prompt holds '☃', '⛄', which the run's tokenizer cannot encode" in caplog.text
    caplog.clear()
    path = tmp_path / "in.txt"
    path.write_text("one\ntwo ☃\n")
    with caplog.at_level("WARNING", logger="attnzoo"):
        assert translate_main([str(translation_run), "--file", str(path), "--beam", "1"]) == 0
    assert "--file line 2 holds '☃'" in caplog.text and "line 1 holds" not in caplog.text
    assert "2 lines translated; 1 with characters the tokenizer never saw" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args",  # --temperature nan passed the check and failed in sampling, in other words than the flag's
    [["--top-k", "0"], ["--top-p", "0.0"], ["--top-p", "1.5"], ["--temperature", "nan"], ["--temperature", "inf"],
     ["--seed", "99999999999999999999"], ["--seed", "-1"]],  # "Overflow when unpacking long long", from torch
)  # fmt: skip
def test_generate_checks_its_sampling_options_by_their_flags_before_loading_the_run(args, tmp_path, capsys):
    # --top-k 0 was refused after the model loaded (and the cap note), as "top_k must be an int >= 1 or None"
    assert generate_main([str(tmp_path / "no-run"), *args]) == 2  # not a run directory: the option comes first
    err = capsys.readouterr().err
    assert f"{args[0]} ({args[1]}) must be" in err and "not a run directory" not in err


def test_the_other_commands_run_is_named_before_its_checkpoint_is_looked_for(lm_run, translation_run, tmp_path, capsys):
    # translate of a language-model run without best.ckpt said "no checkpoint file at .../best.ckpt"
    import shutil

    for run, main, other in ((lm_run, translate_main, "generate"), (translation_run, generate_main, "translate")):
        copy = shutil.copytree(run, tmp_path / run.name, ignore=shutil.ignore_patterns("*.ckpt"))
        assert main([str(copy), "--text" if main is translate_main else "--prompt", "The"]) == 2
        err = capsys.readouterr().err
        assert f"is a '{saved_kind(copy)}' run" in err and f"use python -m attnzoo.{other}" in err, err


def test_an_override_that_changes_the_model_is_named_in_the_error_in_a_few_lines(lm_run, capsys):
    # "checkpoint ... does not fit the model of <run>/config.yaml" and dozens of size-mismatch lines, blaming the run
    dim = load_run(lm_run, with_data=False).cfg.section("model")["dim"]
    assert generate_main([str(lm_run), "--prompt", "The", f"model.dim={dim * 2}"]) == 2
    err = capsys.readouterr().err
    assert f"config.yaml with model.dim={dim * 2}: these change the model" in err
    assert err.count("size mismatch") == 3 and "more)" in err


def test_generate_takes_null_for_no_top_k_or_top_p_cut_as_its_error_says(lm_run, capsys):
    # "--top-k (0) must be ... or null for no top-k cut", and then --top-k null: "invalid int value: 'null'"
    assert generate_main([str(lm_run), "--prompt", "The", "--top-k", "null", "--top-p", "none"]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit):
        generate_main([str(lm_run), "--top-k", "many"])
    assert "invalid int value: 'many'" in capsys.readouterr().err


def test_translate_reads_piped_lines_with_file_dash(translation_run, tmp_path, capsys, monkeypatch):
    # --file - and --file /dev/stdin were refused: "no file at '-'"
    import io
    import sys

    lines = ["The meeting is on 3 March.", "", "5 May 2021"]
    path = tmp_path / "in.txt"
    path.write_text("\n".join(lines) + "\n")
    assert translate_main([str(translation_run), "--file", str(path), "--beam", "1"]) == 0
    from_file = capsys.readouterr().out
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(path.read_bytes())))
    assert translate_main([str(translation_run), "--file", "-", "--beam", "1"]) == 0
    assert capsys.readouterr().out == from_file and from_file.count("\n") == 3
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"ok\nPreis: 5\xa4\n")))
    assert translate_main([str(translation_run), "--file", "-"]) == 2
    assert "--file - line 2, column 9" in capsys.readouterr().err
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    assert translate_main([str(translation_run), "--file", "-"]) == 2
    assert "--file -: no line to translate" in capsys.readouterr().err
    import tempfile

    assert not list(Path(tempfile.gettempdir()).glob("attnzoo-translate-*"))  # nothing left in the temp folder
    assert translate_main([str(translation_run), "--file", str(path.parent)]) == 2  # was "no file at" a folder
    assert f"--file: {str(path.parent)!r} is a directory; give a text file" in capsys.readouterr().err
    import os
    import threading

    fifo = tmp_path / "fifo"  # a pipe by name (--file /dev/stdin, --file <(cmd)) was refused: "does not exist"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(path.read_bytes()), daemon=True)  # no reader: no hang
    writer.start()
    assert translate_main([str(translation_run), "--file", str(fifo), "--beam", "1"]) == 0
    writer.join()
    assert capsys.readouterr().out == from_file


def test_ctrl_c_while_translating_or_generating_is_one_line_and_status_130(
    translation_run, lm_run, tmp_path, capsys, monkeypatch
):
    # a KeyboardInterrupt traceback ending in the attention kernel, exit status 1
    import attnzoo.generate
    import attnzoo.translate

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(attnzoo.translate, "translate_file", interrupted)
    monkeypatch.setattr(attnzoo.generate, "generate", interrupted)
    path = tmp_path / "in.txt"
    path.write_text("5 May 2021\n")
    assert translate_main([str(translation_run), "--file", str(path), "--beam", "1"]) == 130
    assert capsys.readouterr().err.endswith("attnzoo translate: interrupted; the translations written so far are whole "
                                            "lines\n")  # fmt: skip
    assert generate_main([str(lm_run), "--prompt", "The"]) == 130
    assert capsys.readouterr().err == "attnzoo generate: interrupted; nothing generated\n"


def test_translate_strips_its_input_as_training_strips_its_pairs(translation_run, capsys):
    # a trailing space was a token training never saw (it strips both sides of each pair), and changed the
    # translation; "   " was translated while "" was refused
    tok = SubwordTokenizer.load(translation_run / "tokenizer.json")
    padded = source_batch(tok, ["  42 kilometres \t", "twelve"], 64)
    plain = source_batch(tok, ["42 kilometres", "twelve"], 64)
    assert all(torch.equal(a, b) for a, b in zip(padded[:2], plain[:2], strict=True)) and padded[2] == plain[2]
    for text, what in (("   ", "only whitespace"), ("", "empty")):
        assert translate_main([str(translation_run), "--text", "ok", "--text", text]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and f"--text: {text!r} is {what}; give a sentence" in captured.err


def test_translate_file_ends_lines_at_a_lone_carriage_return(translation_run, tmp_path, capsys):
    # old Mac Excel's "Tab delimited text" ends lines with "\r" alone: the whole file was one sentence
    lines = ["The meeting is on 3 March.", "", "42 kilometres", " \t ", "5 May 2021"]
    path = tmp_path / "in.txt"
    path.write_bytes(b"\xef\xbb\xbf" + "\r".join(lines).encode() + b"\r")
    assert translate_main([str(translation_run), "--file", str(path), "--beam", "1"]) == 0
    captured = capsys.readouterr()
    full = [line for line in lines if line.strip()]
    expected = iter(translate(translation_run, full, beam=1))
    assert captured.out.split("\n")[:-1] == [next(expected) if line.strip() else "" for line in lines]
    assert f"{len(lines)} lines translated" in captured.err and "never saw" not in captured.err  # no "\r" token
    path.write_bytes(b"ok\r\nfine\rPreis: 5\xa4\nok\n")  # a stray "\r" in a file of "\n" ends stays in its line 2
    assert translate_main([str(translation_run), "--file", str(path)]) == 2
    assert f"--file {path} line 2, column 14" in capsys.readouterr().err
    path.write_bytes("ok\r\n".encode("utf-16"))  # Excel's "Unicode Text" was "a binary file"
    assert translate_main([str(translation_run), "--file", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"--file {path}: the file is UTF-16 text" in err and "iconv -f utf-16 -t utf-8 in.txt" in err


def test_resuming_a_finished_translation_run_keeps_its_validation_examples(tmp_path):
    """A resume of a finished run trains nothing and tests again: examples.json / examples.txt were rewritten with
    the new test examples alone, the validation examples of the training gone."""
    import json

    from attnzoo.fit import main as fit_main
    from attnzoo.run import fit
    from tests.helpers import QUICK, SMOKE_STEPS

    recipe = ROOT / "recipes" / "translation.yaml"
    steps = [*SMOKE_STEPS, "run.baseline=false"]
    run_dir = fit(load([recipe], [*smoke_overrides(load([recipe])), *QUICK, *steps, f"run.dir={tmp_path}"]))
    before = json.loads((run_dir / "examples.json").read_text())
    assert set(before) == {"val", "test"} and before["val"]
    assert fit_main(["--resume", str(run_dir)]) == 0
    after = json.loads((run_dir / "examples.json").read_text())
    assert after == before  # the same checkpoints decode the same examples
    text = (run_dir / "examples.txt").read_text()
    assert "# val (epoch 0, step 2)" in text and "# test (epoch" in text


def test_a_checkpoint_of_another_run_is_named_as_such_not_as_a_replaced_tokenizer(tmp_path, translation_run, capsys):
    # `translate <run> --checkpoint <another run's best.ckpt>` said "<run>/tokenizer.json was replaced (another
    # run's?). Put the run's own tokenizer.json back", though nothing had been replaced
    from attnzoo.run.tokenizer_stamp import STAMP_KEY

    foreign = tmp_path / "other" / "best.ckpt"  # trained with another tokenizer (its stamp says so)
    foreign.parent.mkdir()
    saved = torch.load(translation_run / "checkpoints" / "best.ckpt", weights_only=True)
    torch.save({**saved, STAMP_KEY: "0" * 64}, foreign)
    assert translate_main([str(translation_run), "--checkpoint", str(foreign), "--text", "three four"]) == 2
    err = capsys.readouterr().err
    assert f"the checkpoint is not one of {translation_run}'s own" in err and "was replaced" not in err


def test_a_translation_run_made_before_bleu_tokenize_is_scored_and_resumed_as_it_ran(tmp_path, monkeypatch, caplog):
    # a run's config.yaml without data.bleu_tokenize (made before it) was refused by --resume ("data.bleu_tokenize:
    # '<not set>' -> 'zh'"), and evaluate scored it with another BLEU than its summary's (13a words)
    from attnzoo.run import fit

    rows = [
        f"the {i} animal sees place {i % 8}\t{'猫狗鸟鱼'[i % 4]}今天看见{'河山房子花园学校'[i % 8]}。"
        for i in range(80)
    ]
    (tmp_path / "pairs.tsv").write_text("\n".join(rows) + "\n")
    cfg = load([ROOT / "recipes" / "translation.yaml"])
    small = [o for o in smoke_overrides(cfg) if not o.startswith("data.num_")]  # those size the embedded data
    files = [f"data.train={tmp_path / 'pairs.tsv'}", "run.baseline=false", f"run.dir={tmp_path / 'runs'}"]
    run = fit(load([ROOT / "recipes" / "translation.yaml"], [*small, *files, "trainer.max_epochs=1"]))
    text = (run / "config.yaml").read_text()
    assert "  bleu_tokenize: zh\n" in text  # chosen from the targets by a run made now
    # another BLEU asked of the run made now: its task.bleu_tokenize ("zh") was refused as contradicting the data
    assert load_run(run, overrides=["data.bleu_tokenize=char"]).task.bleu_tokenize == "char"
    with caplog.at_level(logging.WARNING, logger="attnzoo"):  # the task's key is the data's: said where it is typed
        assert load_run(run, overrides=["task.bleu_tokenize=char"]).task.bleu_tokenize == "zh"
    assert (
        "task.bleu_tokenize: 'char' (set in the command line" in caplog.text and "set data.bleu_tokenize" in caplog.text
    )
    (run / "config.yaml").write_text("".join(line for line in text.splitlines(True) if "bleu_tokenize" not in line))
    loaded = load_run(run)
    assert loaded.cfg.section("data")["bleu_tokenize"] == "13a" and loaded.task.bleu_tokenize == "13a"
    # `baseline --run-dir` scores its translation memory with the BLEU the run's model was scored with
    import attnzoo.run.baseline
    from attnzoo.baseline import main as baseline_main

    seen = []

    def fit_baseline(data, **_):  # stands in for the fit: what it would score with
        seen.append(data.bleu_tokenize)
        raise ValueError("stood in")

    monkeypatch.setattr(attnzoo.run.baseline, "fit_baseline", fit_baseline)
    assert baseline_main(["--run-dir", str(run)]) == 2 and seen == ["13a"]
    fit(load([run / "config.yaml"], ["trainer.max_epochs=2"]), resume=run)
    assert json.loads((run / "summary.json").read_text())["epochs"] == 2

"""`attnzoo.viz`: attention rollout against its definition, captured maps, and the command on a saved run."""

import logging
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from attnzoo.attention.attention import ATTENTION_KINDS
from attnzoo.config import ConfigError, load
from attnzoo.drawing.rollout import capture, rollout
from attnzoo.run import build
from attnzoo.viz import main

ROOT = Path(__file__).resolve().parent.parent
VIT = ROOT / "recipes" / "vit.yaml"
AST = ROOT / "recipes" / "ast.yaml"
TINY = ["model.embed_dim=16", "model.depth=2", "model.num_heads=2", "model.mlp_ratio=1.0", "data.batch_size=8",
        "model.patch_size=7", "model.drop_path_rate=0.0"]  # fmt: skip


def _maps(layers: int, b: int = 2, h: int = 3, n: int = 5) -> list[torch.Tensor]:
    return [torch.randn(b, h, n, n).softmax(-1) for _ in range(layers)]


def test_rollout_of_one_layer_without_residual_is_the_head_mean():
    (a,) = _maps(1)
    torch.testing.assert_close(rollout([a], residual=0.0), a.mean(1))
    torch.testing.assert_close(rollout([a], residual=0.0, head_fusion="max"), a.amax(1) / a.amax(1).sum(-1, True))


def test_rollout_multiplies_residual_corrected_layers_in_order():
    maps, residual = _maps(3), 0.3
    eye = torch.eye(5)
    expected = eye.expand(2, 5, 5)
    for a in maps:  # definition (Abnar & Zuidema, 2020): A_l' = r I + (1 - r) mean_h A_l, rollout = A_L' ... A_1'
        step = residual * eye + (1 - residual) * a.mean(1)
        expected = step @ expected
    out = rollout(maps, residual=residual)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.sum(-1), torch.ones(2, 5))
    assert not torch.allclose(rollout(maps[::-1], residual=residual), out)  # the order matters


@pytest.mark.parametrize(
    ("maps", "kwargs", "message"),
    [
        ([], {}, "at least one"),
        ([torch.rand(1, 2, 4, 6)], {}, "square"),
        (_maps(1), {"residual": 1.5}, "residual"),
        (_maps(1), {"head_fusion": "sum"}, "head_fusion"),
    ],
)
def test_rollout_rejects_bad_input(maps, kwargs, message):
    with pytest.raises(ValueError, match=message):
        rollout(maps, **kwargs)


def _saved_run(path: Path, recipe: Path, overrides: list[str]) -> Path:
    """A run directory as `attnzoo fit` writes it (config.yaml, the data's artifacts such as a learned
    tokenizer.json, checkpoints/best.ckpt), without training."""
    cfg = load([recipe], overrides)
    data, task, cfg = build(cfg)
    data.save_artifacts(path)
    (path / "config.yaml").write_text(cfg.to_yaml())
    (path / "checkpoints").mkdir()
    torch.save({"state_dict": task.state_dict()}, path / "checkpoints" / "best.ckpt")
    return path


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return _saved_run(tmp_path_factory.mktemp("vit"), VIT, TINY)


@pytest.mark.parametrize("kind", sorted(ATTENTION_KINDS))
def test_captured_maps_are_one_per_layer_and_do_not_change_the_output(kind):
    cfg = load([VIT], [*TINY, f"model.attention.kind={kind}", "trainer.precision=32-true"])
    net = build(cfg)[1].net.eval()  # the recipe's `auto` keys resolved from its data, as in a run
    image = torch.randn(2, 1, 28, 28)
    with torch.no_grad():
        plain = net(image=image)
    logits, maps = capture(net, {"image": image})
    torch.testing.assert_close(logits, plain, rtol=1e-4, atol=1e-5)  # eager while capturing, the run's otherwise
    assert len(maps) == 2, "one map per layer"
    assert all(m.shape[:3] == (2, 2, 17) and m.isfinite().all() for m in maps)  # 4x4 patches + class token
    assert not torch.allclose(maps[0], maps[1])
    if kind == "mha":
        torch.testing.assert_close(maps[0].sum(-1), torch.ones(2, 2, 17))


def test_viz_command_draws_a_validation_example_and_an_image_file(run_dir, tmp_path, capsys):
    from PIL import Image

    out = tmp_path / "val"
    assert main([str(run_dir), "--index", "3", "--out", str(out)]) == 0
    written = capsys.readouterr().out.split()
    assert [Path(p).name for p in written] == [
        "attention_matrices.png",
        "prefix_attention.png",
        "rollout.png",
        "maps.pt",
    ]
    for name in written[:3]:
        data = Path(name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    saved = torch.load(out / "maps.pt")
    assert len(saved["maps"]) == 2 and saved["rollout"].shape == (1, 17, 17)
    torch.testing.assert_close(saved["rollout"], rollout(saved["maps"]))

    digit = tmp_path / "digit.png"
    Image.fromarray((torch.rand(40, 40) * 255).byte().numpy(), mode="L").save(digit)  # resized to 28x28
    assert main([str(run_dir), "--input", str(digit), "--out", str(tmp_path / "file")]) == 0
    assert (tmp_path / "file" / "rollout.png").is_file()


def test_a_vit_without_a_class_token_gets_the_rollout_of_its_mean_token(tmp_path, capsys, caplog):
    # "the keys are not patches of the input": the patches of an average-pooled ViT were drawn as matrices only
    (tmp_path / "run").mkdir()
    run = _saved_run(tmp_path / "run", VIT, [*TINY, "model.class_token=false", "model.global_pool=avg"])
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        assert main([str(run), "--index", "0", "--out", str(tmp_path / "out")]) == 0
    assert [Path(p).name for p in capsys.readouterr().out.split()] == [
        "attention_matrices.png",
        "rollout.png",
        "maps.pt",
    ]
    assert "no prefix token (a ViT's model.class_token false" in caplog.text and "not patches" not in caplog.text
    saved = torch.load(tmp_path / "out" / "maps.pt")
    torch.testing.assert_close(saved["rollout"], rollout(saved["maps"]))


def test_input_files_of_one_name_in_two_folders_are_drawn_into_two_folders(tmp_path, capsys):
    # cat/4.png and dog/4.png were both drawn into <run>/viz/4/: the second replaced the first's drawings
    from PIL import Image

    (tmp_path / "run").mkdir()
    run = _saved_run(tmp_path / "run", VIT, TINY)
    for cls in ("cat", "dog"):
        (tmp_path / cls).mkdir()
        Image.fromarray((torch.rand(28, 28) * 255).byte().numpy(), mode="L").save(tmp_path / cls / "4.png")
    folders = []
    for cls in ("cat", "dog", "cat"):  # the same file again: its own folder again
        assert main([str(run), "--input", str(tmp_path / cls / "4.png")]) == 0
        folders.append(Path(capsys.readouterr().out.split()[0]).parent)
    assert folders[0] == folders[2] == run / "viz" / "4" and folders[1].name.startswith("4-")
    inputs = [torch.load(f / "maps.pt")["input"] for f in folders[:2]]
    assert inputs == [str((tmp_path / cls / "4.png").resolve()) for cls in ("cat", "dog")]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--input", "notes.txt"], "is not a file"),
        (["--index", "100000"], "the val split has 500 examples"),
        (["--index", "-1"], "--index -1: the val split has 500 examples (valid: 0-499)"),
        (["--checkpoint", "last"], "no checkpoint file"),
    ],
)
def test_viz_command_errors_name_the_problem(run_dir, args, message, capsys):
    assert main([str(run_dir), *args]) == 2
    assert message in capsys.readouterr().err


def test_viz_command_names_an_input_image_it_cannot_read(run_dir, tmp_path, capsys):
    (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n not an image")
    assert main([str(run_dir), "--input", str(tmp_path / "bad.png"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "--input: cannot read" in err and "bad.png" in err and "could not write" not in err


def test_an_ast_input_is_drawn_over_its_spectrogram_with_the_models_time_by_frequency_grid():
    from attnzoo.models import MODELS
    from attnzoo.viz import canvas_for

    net = MODELS["ast"](num_classes=3, sample_rate=8000, n_mels=32, target_frames=98, embed_dim=16, depth=1,
                        num_heads=2, fstride=16, tstride=6).eval()  # fmt: skip
    audio = torch.randn(1, 16000)  # 2 s: longer than the 1 s clips the positions were learned for
    tp, fp = net.grid_size_for(audio.shape[-1])
    assert (tp, fp) == (31, 2)  # 198 frames -> (198 - 16) // 6 + 1 time patches; 32 mels -> 2
    canvas = canvas_for(net, {"audio": audio}, 2 + tp * fp)
    values = torch.arange(tp * fp, dtype=torch.float)  # time-major: token t * fp + f is time t, frequency f
    assert canvas is not None and canvas.to_grid(values).shape == (fp, tp)  # drawn frequency up, time across
    assert canvas.to_grid(values)[1, 3] == 3 * fp + 1
    assert canvas_for(net, {"audio": audio}, 2 + tp * fp + 1) is None  # tokens that are not this clip's patches


def test_viz_command_draws_an_ast_run_over_the_spectrogram_of_a_wav_file(tmp_path, capsys, monkeypatch):
    from scipy.io import wavfile

    import attnzoo.viz as viz

    drawn = []  # the spectrogram under the maps came from the net in training mode: with SpecAugment's masks
    monkeypatch.setattr(viz, "spectrogram_canvas", lambda features, grid: drawn.append(features) or None)
    small = ["data.synthetic.per_class={train: 2, val: 1, test: 1}", "model.depth=2", "model.embed_dim=32",
             "model.spec_augment={freq_mask: 8, time_mask: 40, num_masks: 2}"]  # fmt: skip
    (tmp_path / "ast").mkdir()
    run = _saved_run(tmp_path / "ast", AST, small)
    wav = tmp_path / "tone.wav"
    t = torch.arange(16000 * 2) / 16000  # 2 s at 16 kHz: resampled to the run's 8 kHz, longer than its 1 s clips
    wavfile.write(wav, 16000, (0.3 * torch.sin(2 * torch.pi * 440 * t)).numpy().astype("float32"))
    assert main([str(run), "--input", str(wav), "--out", str(tmp_path / "spectrogram")]) == 0
    (features,) = drawn
    assert features.dim() == 2 and not (features == 0).all(0).any()  # [F, T]: no time frame masked whole
    capsys.readouterr()
    monkeypatch.undo()
    assert main([str(run), "--input", str(wav), "--out", str(tmp_path / "out")]) == 0
    written = [Path(p).name for p in capsys.readouterr().out.split()]
    assert written == ["attention_matrices.png", "prefix_attention.png", "rollout.png", "maps.pt"]
    saved = torch.load(tmp_path / "out" / "maps.pt")
    (time_patches, freq_patches) = (31, 2)  # 198 frames -> (198 - 16) // 6 + 1 time patches; 32 mels -> 2
    assert saved["maps"][0].shape == (1, 4, 2 + time_patches * freq_patches, 2 + time_patches * freq_patches)
    assert main([str(run), "--input", str(tmp_path / "out" / "rollout.png")]) == 2  # not a WAV file
    assert "is not an audio file (.wav)" in capsys.readouterr().err
    wavfile.write(tmp_path / "click.wav", 16000, (0.3 * torch.sin(2 * torch.pi * 440 * t[:800])).numpy())  # 50 ms
    assert main([str(run), "--input", str(tmp_path / "click.wav")]) == 2
    assert f"--input '{tmp_path / 'click.wav'}': a clip of" in capsys.readouterr().err
    wavfile.write(tmp_path / "tick.wav", 16000, (0.3 * torch.sin(2 * torch.pi * 440 * t[:160])).numpy())  # 10 ms
    assert main([str(run), "--input", str(tmp_path / "tick.wav")]) == 2  # shorter than one window: named too
    assert f"--input '{tmp_path / 'tick.wav'}': clips of" in capsys.readouterr().err


def test_viz_command_draws_a_text_given_on_the_command_line(tmp_path, capsys):
    small = ["data.listops.num_train=64", "data.listops.num_val=16", "data.listops.num_test=16", "model.dim=16"]
    (tmp_path / "text").mkdir()
    run = _saved_run(tmp_path / "text", ROOT / "recipes" / "text_cls.yaml", [*small, "model.depth=2"])
    expression = "[MAX 2 9 [MIN 4 7 ] 0 ]"
    assert main([str(run), "--text", expression, "--out", str(tmp_path / "out")]) == 0
    assert [Path(p).name for p in capsys.readouterr().out.split()] == ["attention_matrices.png", "maps.pt"]
    saved = torch.load(tmp_path / "out" / "maps.pt")
    tokens = len(expression.split())  # ListOps words are tokens
    assert len(saved["maps"]) == 2 and saved["maps"][0].shape[-1] in (tokens, tokens + 1)  # (+ a class token)
    assert main([str(run), "--text", expression, "--input", str(tmp_path / "x.png")]) == 2
    assert "--text: for runs with data kind 'text'" in capsys.readouterr().err
    # two texts drawn into the run's viz/: the second went over the first's drawings, which named no text
    other = "[MIN 1 2 ]"
    assert main([str(run), "--text", expression]) == 0 and main([str(run), "--text", other]) == 0
    drawn = {p.parent.name: torch.load(p)["input"] for p in (run / "viz").glob("*/maps.pt")}
    assert drawn["text"] == expression and sorted(drawn.values()) == sorted([expression, other])
    assert main([str(run), "--text", expression]) == 0 and len(list((run / "viz").glob("*/maps.pt"))) == 2


def test_a_text_is_read_as_training_reads_a_file_and_its_unknown_characters_are_named(tmp_path, capsys, caplog):
    """A learned tokenizer (text files): tabs and newlines are one space, as in training; a character the tokenizer
    never saw is named, as translate and generate name it."""
    lines = ["text,label"] + [f"{w} film number {i},{i % 2}" for i, w in enumerate(["good", "bad"] * 20)]
    for split in ("train", "val"):
        (tmp_path / f"{split}.csv").write_text("\n".join(lines) + "\n")
    files = [f"data.train={tmp_path / 'train.csv'}", f"data.val={tmp_path / 'val.csv'}", "run.baseline=false"]
    (tmp_path / "run").mkdir()
    run = _saved_run(tmp_path / "run", ROOT / "recipes" / "text_cls.yaml", [*files, "model.dim=16", "model.depth=1"])
    logits = []
    for i, text in enumerate(["good film", "good\tfilm", "good \n film"]):
        assert main([str(run), "--text", text, "--out", str(tmp_path / f"out{i}")]) == 0
        logits.append(torch.load(tmp_path / f"out{i}" / "maps.pt")["logits"])
    torch.testing.assert_close(logits[1], logits[0], rtol=0, atol=0)
    torch.testing.assert_close(logits[2], logits[0], rtol=0, atol=0)
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        assert main([str(run), "--text", "good \u2603 film", "--out", str(tmp_path / "snow")]) == 0
    assert "'\u2603', which the run's tokenizer cannot encode" in caplog.text


def test_viz_command_draws_cross_attention_maps_of_a_text_image_run(tmp_path, capsys, monkeypatch, caplog):
    small = ["data.num_train=32", "data.num_val=8", "model.image_depth=1", "model.fusion_depth=1", "model.fusion=both"]
    (tmp_path / "ti").mkdir()
    run = _saved_run(tmp_path / "ti", ROOT / "recipes" / "text_image.yaml", [*small, "model.text_depth=1"])
    assert main([str(run), "--out", str(tmp_path / "out"), "--count", "2"]) == 0
    names = [Path(p).name for p in capsys.readouterr().out.split()]
    assert names[:3] == ["attention_matrices.png", "rollout.png", "maps.pt"]  # the image's own attention, rolled out
    assert names[3:] == ["cross_attention_000.png", "cross_attention_001.png"]
    assert all((tmp_path / "out" / "cross_attention" / n).stat().st_size > 0 for n in names[3:])
    saved = torch.load(tmp_path / "out" / "maps.pt", weights_only=True)
    image = [i for i, n in enumerate(saved["modules"]) if n.startswith(("image_encoder.", "image_blocks."))]
    assert len(saved["modules"]) == len(saved["maps"]) > len(image) == 2  # text, cross-attention calls besides
    torch.testing.assert_close(saved["rollout"], rollout([saved["maps"][i] for i in image]))
    assert main([str(run), "--count", "0"]) == 2
    assert "--count: 0" in capsys.readouterr().err
    # --index: the maps are of that example and the next, named by their index (they were of examples 0 and 1)
    from attnzoo.drawing import cross_attention

    drawn = []
    monkeypatch.setattr(
        cross_attention, "draw_cross_attention", lambda image, text, maps, **k: drawn.append(text) or k["path"]
    )
    assert main([str(run), "--out", str(tmp_path / "out5"), "--count", "2", "--index", "5"]) == 0
    assert [Path(p).name for p in capsys.readouterr().out.split()][3:] == [
        "cross_attention_005.png",
        "cross_attention_006.png",
    ]
    from attnzoo.run import load_run

    assert drawn == load_run(run).data.datasets["val"].texts[5:7]
    assert main([str(run), "--index", "8"]) == 2  # before anything is drawn
    assert "--index 8: the val split has 8 examples (valid: 0-7)" in capsys.readouterr().err
    drawn.clear()  # --count past the split's end: the examples there are drawn, and the log says how many
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        assert main([str(run), "--out", str(tmp_path / "end"), "--count", "5", "--index", "6"]) == 0
    assert len(drawn) == 2 and "the val split ends at example 7; drew 2 of the 5 maps asked" in caplog.text
    # --split test: the example drawn and the maps are the test split's (the drawing was of val example N)
    drawn.clear()
    assert main([str(run), "--out", str(tmp_path / "t1"), "--count", "1", "--index", "1", "--split", "test"]) == 0
    test = load_run(run).data.datasets["test"]
    assert drawn == test.texts[1:2]
    label = torch.load(tmp_path / "t1" / "maps.pt", weights_only=True)["logits"]
    capture_net = load_run(run).net.eval()
    from attnzoo.viz import example_input

    inputs, _ = example_input(load_run(run), 1, "test")
    with torch.no_grad():
        torch.testing.assert_close(label, capture_net(**inputs), rtol=1e-4, atol=1e-5)
    # FiLM: the only attention is the question's; a question of as many tokens as the image has patches (3 x 3) was
    # drawn as a rollout over the image
    (tmp_path / "film").mkdir()
    film = ["data.num_train=32", "data.num_val=8", "data.tokenizer=bytes", "data.max_len=9", "model.text_depth=1"]
    run = _saved_run(tmp_path / "film", ROOT / "recipes" / "text_image.yaml", film)
    capsys.readouterr()
    assert main([str(run), "--out", str(tmp_path / "film_out")]) == 0
    assert [Path(p).name for p in capsys.readouterr().out.split()] == ["attention_matrices.png", "maps.pt"]
    saved = torch.load(tmp_path / "film_out" / "maps.pt", weights_only=True)
    assert saved["maps"][0].shape[-1] == 9 and all(n.startswith("text_encoder.") for n in saved["modules"])


def test_an_ast_run_evaluated_on_other_clips_normalizes_them_with_its_own_statistics(tmp_path):
    """load_run (evaluate, viz) reads the run's audio_stats.json: other clips (here another draw of the synthetic
    syllables) no longer contradict the feature statistics the model was trained with."""
    from attnzoo.run import load_run

    small = ["data.synthetic.per_class={train: 2, val: 1, test: 1}", "model.depth=1", "model.embed_dim=32"]
    run = _saved_run(tmp_path, AST, small)
    trained = load([run / "config.yaml"]).section("model")["feature_mean"]
    loaded = load_run(run, "best", [], ["data.synthetic.per_class={train: 3, val: 1, test: 1}"])
    assert loaded.cfg.section("model")["feature_mean"] == trained
    # longer clips than it trained on: its position table stays, interpolated (evaluate said the data had changed)
    frames = load([run / "config.yaml"]).section("model")["target_frames"]
    longer = load_run(run, "best", [], ["data.clip_seconds=2.0"])
    assert longer.cfg.section("model")["target_frames"] == frames and longer.net.target_frames == frames
    batch = next(iter(longer.data.val_dataloader()))
    assert batch["audio"].shape[-1] == 2 * longer.data.sample_rate and torch.isfinite(longer.net(batch["audio"])).all()


def test_an_input_image_is_read_as_training_reads_files(tmp_path):
    # viz --input converted a 16-bit PNG with PIL's convert("RGB"), which clips it to white; training scales it
    from types import SimpleNamespace

    import numpy as np
    from PIL import Image

    from attnzoo.viz import image_input

    Image.fromarray(np.full((8, 8), 16000, dtype=np.uint16)).save(tmp_path / "g16.png")  # 16000 / 65535 ~ 62 / 255
    to_tensor = lambda img: torch.from_numpy(np.asarray(img, dtype=np.float32) / 255).permute(2, 0, 1)  # noqa: E731
    data = SimpleNamespace(in_chans=3, input_transform=lambda: to_tensor)
    image = image_input(data, tmp_path / "g16.png")["image"]
    assert image.shape == (1, 3, 8, 8) and 55 / 255 < image.mean().item() < 70 / 255


def test_an_example_of_a_padded_batch_is_drawn_over_its_real_tokens_alone(tmp_path, capsys):
    # data.pad_to_multiple=16: a 14-token example was drawn as 17 x 17 (padded query rows attending, key columns 0)
    from attnzoo.run import load_run

    small = ["data.listops.num_train=64", "data.listops.num_val=16", "data.listops.num_test=16", "model.dim=16"]
    (tmp_path / "text").mkdir()
    padded = [*small, "model.depth=1", "data.pad_to_multiple=16"]
    run = _saved_run(tmp_path / "text", ROOT / "recipes" / "text_cls.yaml", padded)
    loaded = load_run(run, "best")
    loader = loaded.data.val_dataloader()
    index = next(i for i in range(len(loader.dataset)) if len(loader.dataset[i][0]) % 16)  # an example with padding
    tokens = len(loader.dataset[index][0])
    assert main([str(run), "--index", str(index), "--out", str(tmp_path / "out")]) == 0
    saved = torch.load(tmp_path / "out" / "maps.pt")
    assert saved["maps"][0].shape[-2:] == (1 + tokens, 1 + tokens)  # the class token and the example's tokens
    batch = loader.collate_fn([loader.dataset[index]])  # as the loader pads it: the same prediction
    batch.pop("label")
    logits, _ = capture(loaded.net, batch)
    torch.testing.assert_close(saved["logits"], logits, rtol=1e-5, atol=1e-6)


def test_negative_weights_are_drawn_on_a_diverging_scale_and_others_from_zero(tmp_path, monkeypatch):
    # differential attention's negative weights were drawn as 0 (vmin=0)
    import matplotlib.axes

    from attnzoo.drawing.matrices import plot_matrices

    drawn = []
    imshow = matplotlib.axes.Axes.imshow
    monkeypatch.setattr(matplotlib.axes.Axes, "imshow", lambda ax, *a, **kw: drawn.append(imshow(ax, *a, **kw)))
    signed = torch.tensor([[[[-0.5, 0.0, 1.5], [0.2, 0.3, 0.5], [1.0, 0.0, 0.0]]]])  # [1, 1, 3, 3]
    plot_matrices([signed], tmp_path / "signed.png", title="differential")
    (image,) = drawn
    assert image.norm.vmin == -image.norm.vmax == -1.5  # symmetric about 0
    assert image.to_rgba(-0.5) != image.to_rgba(0.0) != image.to_rgba(0.5)
    drawn.clear()
    plot_matrices([signed.abs().softmax(-1)], tmp_path / "plain.png", title="softmax")
    (image,) = drawn
    assert image.norm.vmin == 0.0 and image.get_cmap().name == "viridis"


def test_overlays_of_negative_weights_are_signed_and_a_grey_image_keeps_its_shades(tmp_path, monkeypatch):
    # the prefix maps, rollout, alignment and cross-attention overlays drew negative weights as 0, and a panel with
    # none above 0 stopped viz ("minvalue must be less than or equal to maxvalue"); a grey image was stretched
    import matplotlib.axes

    from attnzoo.drawing.alignment import draw_alignment
    from attnzoo.drawing.cross_attention import draw_cross_attention
    from attnzoo.drawing.matrices import image_canvas, plot_prefix_maps, plot_rollout

    drawn = []
    imshow = matplotlib.axes.Axes.imshow
    monkeypatch.setattr(matplotlib.axes.Axes, "imshow", lambda ax, *a, **kw: drawn.append(imshow(ax, *a, **kw)))
    maps = [-torch.rand(1, 2, 5, 5)]  # [B, H, 1 + 4 patches, 1 + 4]: every weight below 0
    grey = torch.full((1, 8, 8), 0.47)
    grey[:, 2:6, 2:6] = 0.55  # a faint square on a mid-grey ground
    canvas = image_canvas(grey, (2, 2), ([0.0], [1.0]))
    plot_prefix_maps(maps, canvas, 1, tmp_path / "p.png", title="differential")
    plot_rollout(maps[0].mean(1), canvas, 1, tmp_path / "r.png", title="differential")  # [B, L, L]
    backgrounds = [im for im in drawn if im.get_array().ndim == 2 and im.get_cmap().name == "gray"]
    heats = [im for im in drawn if im.get_cmap().name != "gray"]
    assert backgrounds and all(im.get_clim() == (0.0, 1.0) for im in backgrounds)
    assert heats and all(im.get_cmap().name == "RdBu_r" and im.norm.vmin == -im.norm.vmax < 0 for im in heats)
    drawn.clear()
    draw_alignment([-torch.rand(2, 3, 4)], list("abcd"), list("xyz"), tmp_path / "a.png", title="t")
    draw_cross_attention(torch.zeros(3, 16, 16), "red", [-torch.rand(2, 3, 16)], grid_size=(4, 4),
                         path=tmp_path / "c.png")  # fmt: skip
    signed = [im for im in drawn if im.get_cmap().name == "RdBu_r"]
    assert len(signed) == 1 + 2 and all(im.norm.vmin < 0 for im in signed)


SOURCE = ["\u2581The", "\u2581con", "cert", "\u2581is", "\u2581on", "\u2581Friday", ".", "</s>"]
TARGET = ["\u2581Das", "\u2581Konzert", "\u2581ist", "\u2581am", "\u2581Freitag", ".", "</s>"]
LONG = "(cross-attention, heads averaged; captured on the eager backend)"  # wider than a 1-layer alignment


def _figures(layers: int, tmp: Path) -> dict[str, Callable[[], Path]]:
    """Each drawing of viz with `layers` layers (attention over a 4x4 grid of patches and a class token)."""
    from attnzoo.drawing.alignment import draw_alignment
    from attnzoo.drawing.cross_attention import draw_cross_attention
    from attnzoo.drawing.matrices import image_canvas, plot_matrices, plot_prefix_maps, plot_rollout

    maps, title = _maps(layers, b=1, n=17), "vit: predicted 3 (0.12), label 7\n(weights captured on the eager backend)"
    canvas = image_canvas(torch.rand(3, 32, 32), (4, 4))
    cross = [torch.rand(2, len(TARGET), len(SOURCE)).softmax(-1) for _ in range(layers)]  # [H, T, S]
    words = [torch.rand(2, 24, 16).softmax(-1) for _ in range(layers)]  # [H, L, N]: 24 bytes over 4x4 patches
    return {
        "matrices": lambda: plot_matrices(maps, tmp / "m.png", title=title, prefix=1),
        "prefix": lambda: plot_prefix_maps(maps, canvas, 1, tmp / "p.png", title=title),
        "rollout": lambda: plot_rollout(rollout(maps), canvas, 1, tmp / "r.png", title=title),
        "alignment": lambda: draw_alignment(
            cross, SOURCE, TARGET, tmp / "a.png", title=f"The concert.\n-> Das.\n{LONG}"
        ),
        "one word, a long title": lambda: draw_alignment(
            [c[:, :1, :1] for c in cross], SOURCE[:1], TARGET[:1], tmp / "a1.png", title=f"{LONG} {'x' * 200}"
        ),
        "cross-attention": lambda: draw_cross_attention(
            torch.rand(3, 32, 32) * 2 - 1,
            "what color is the square",
            words,
            grid_size=(4, 4),
            path=tmp / "c.png",
            title="predicted: red   answer: blue",
        ),
    }


@pytest.mark.parametrize("layers", [1, 2, 4])
def test_figures_keep_every_label_inside_apart_from_the_others_and_count_layers_from_0(layers, tmp_path, monkeypatch):
    # a 1-layer matrices figure cut its "key" labels at the bottom; a 1-layer alignment's title was wider than the
    # figure and its last line lay over the panel's "layer 0"; cross-attention rows were "layer 1", ... (not 0)
    from tests.helpers.figures import clipped_and_overlapping, record_texts

    drawn, problems = record_texts(monkeypatch), {}
    for name, draw in _figures(layers, tmp_path).items():
        drawn.clear()
        assert draw().stat().st_size > 0
        clipped, overlapping = clipped_and_overlapping(drawn)
        rows = {t.text.split("\n")[0] for t in drawn.values() if t.text.startswith("layer ")}
        wrong_rows = name != "rollout" and rows != {f"layer {i}" for i in range(layers)}
        if clipped or overlapping or wrong_rows:
            problems[name] = {
                "clipped": clipped,
                "overlapping": overlapping,
                "rows": sorted(rows) if wrong_rows else [],
            }
    assert problems == {}


def test_viz_draws_the_image_files_an_image_folder_trains_on():
    # viz refused .ppm / .pgm, which training reads, and took .gif, which training skips
    from torchvision.datasets.folder import IMG_EXTENSIONS

    from attnzoo.viz import INPUTS

    assert set(INPUTS["image"][0]) == set(IMG_EXTENSIONS)


def test_a_multilabel_run_is_titled_with_the_classes_its_sigmoids_choose(tmp_path, monkeypatch):
    # the title was a softmax over the classes ("predicted high (0.48)") for a model scored by a sigmoid per class
    from attnzoo import viz
    from tests.helpers.audio import tone, write_pcm16

    (tmp_path / "clips").mkdir()
    rows = ["path,label,fold"]
    for i in range(12):
        write_pcm16(tmp_path / "clips" / f"{i}.wav", tone(16000, 0.3, 200.0 * (1 + i % 3), 1), 16000)
        rows.append(f'{i}.wav,"{["dog;rain", "rain", "dog"][i % 3]}",{1 + i % 4}')
    (tmp_path / "meta.csv").write_text("\n".join(rows) + "\n")
    data = ["data.source=csv", f"data.csv={tmp_path / 'meta.csv'}", f"data.root={tmp_path / 'clips'}",
            "data.multilabel=true", "data.val_folds=[3]", "data.test_folds=[4]", "task.objective=multilabel",
            "data.clip_seconds=0.3", "model.depth=1", "model.embed_dim=32", "model.num_heads=2"]  # fmt: skip
    (tmp_path / "run").mkdir()
    run = _saved_run(tmp_path / "run", AST, data)
    titles = []
    monkeypatch.setattr(viz, "plot_matrices", lambda maps, path, title, prefix, labels: titles.append(title) or path)
    monkeypatch.setattr(viz, "plot_prefix_maps", lambda *a, **k: a[3])
    monkeypatch.setattr(viz, "plot_rollout", lambda *a, **k: a[3])
    assert main([str(run), "--out", str(tmp_path / "out")]) == 0
    logits = torch.load(tmp_path / "out" / "maps.pt", weights_only=True)["logits"][0]
    probs = logits.sigmoid()
    chosen = [i for i in probs.argsort(descending=True).tolist() if probs[i] >= 0.5] or [int(probs.argmax())]
    names = ["dog", "rain"]
    assert titles[0].startswith(f"run: predicted {names[chosen[0]]} ({probs[chosen[0]]:.2f})")
    assert ", labels " in titles[0] and "dog" in titles[0].split("labels ")[1]  # val clip 2: dog (fold 3)


def _image_folder(root: Path) -> Path:
    """Two classes of 40 px drawings (dark strokes on white: `data.ink` is chosen), 6 images each."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for c, name in enumerate(["bars", "dots"]):
        (root / name).mkdir(parents=True)
        for i in range(6):
            img = np.full((40, 40, 3), 255, dtype=np.uint8)
            img[rng.integers(0, 30) :: 9 if c else 40, :] = 0  # rows of ink
            img[:, rng.integers(0, 30)] = rng.integers(0, 120)
            Image.fromarray(img).save(root / name / f"{i}.png")
    return root


@pytest.mark.parametrize("kind", ["image", "text", "audio"])
def test_one_input_is_drawn_from_the_run_directory_alone_as_its_data_module_prepares_it(kind, tmp_path):
    # viz --input / --text built the run's DataModule: a run directory from another machine (its training files not
    # there) was refused ("data.root: directory ... does not exist"), and every image of a folder was decoded first
    from helpers.audio import RATE, speech_commands, tone, write_pcm16

    from attnzoo.run import load_run
    from attnzoo.viz import audio_input, image_input, text_input

    data = tmp_path / "data"
    if kind == "image":
        _image_folder(data)
        recipe, given = VIT, ["data.dataset=folder", f"data.root={data}", *TINY, "model.patch_size=8"]
        one = tmp_path / "one.png"
        (data / "dots" / "0.png").rename(one)
        args, prepare = ["--input", str(one)], lambda d: image_input(d, one)
    elif kind == "text":
        data.mkdir()
        lines = ["text,label"] + [f"{w} film number {i},{w}" for i, w in enumerate(["good", "bad"] * 10)]
        for split in ("train", "val"):
            (data / f"{split}.csv").write_text("\n".join(lines) + "\n")
        recipe = ROOT / "recipes" / "text_cls.yaml"
        given = [f"data.train={data / 'train.csv'}", f"data.val={data / 'val.csv'}", "model.dim=16", "model.depth=1"]
        args, prepare = ["--text", "a good film"], lambda d: text_input(d, "a good film")
    else:
        speech_commands(data)
        recipe = AST
        given = ["data.source=folder", f"data.root={data}", f"data.sample_rate={RATE}", "model.depth=1",
                 "model.embed_dim=16", "data.clip_seconds=0.5"]  # fmt: skip
        one = tmp_path / "one.wav"
        write_pcm16(one, tone(16000, 0.7, 300.0, 2), 16000)  # resampled to the run's rate, mixed down
        args, prepare = ["--input", str(one)], lambda d: audio_input(d, one)
    (tmp_path / "run").mkdir()
    run = _saved_run(tmp_path / "run", recipe, [*given, "run.baseline=false"])
    reference = load_run(run)  # with the data, as the run was trained
    with torch.no_grad():
        expected = reference.task.eval().net(**prepare(reference.data))
    data.rename(tmp_path / "elsewhere")  # the run directory on another machine
    with pytest.raises(ConfigError, match=f"{data}.* (does not exist|is not a directory)|no such text file: '{data}"):
        load_run(run)  # the data module cannot be built here
    assert main([str(run), *args, "--out", str(tmp_path / "out")]) == 0
    saved = torch.load(tmp_path / "out" / "maps.pt")
    torch.testing.assert_close(saved["logits"], expected, rtol=0, atol=1e-6)
    assert saved["class_names"] == reference.data.class_names


def test_run_inputs_take_the_data_modules_defaults_for_options_a_config_leaves_out(tmp_path):
    # a hand-written config without data.max_len: viz --text raised KeyError 'max_len' (the data module takes 512)
    from attnzoo.viz import RunInputs

    task = "task: {kind: classification}\n"
    (tmp_path / "config.yaml").write_text("data: {kind: text, train: t.csv}\nmodel: {kind: text}\n" + task)
    assert RunInputs(load([tmp_path / "config.yaml"]), []).max_len == 512
    (tmp_path / "config.yaml").write_text("data: {kind: text, train: t.csv, max_len: 64}\nmodel: {kind: text}\n" + task)
    assert RunInputs(load([tmp_path / "config.yaml"]), []).max_len == 64


def test_a_timestamped_run_is_titled_with_its_name_too(tmp_path):
    """The default layout runs/vit/20261127-143243 titled every figure "20261127-143243: predicted ..."."""
    from attnzoo.viz import run_label

    assert run_label(tmp_path / "vit" / "20261127-143243") == "vit/20261127-143243"
    assert run_label(tmp_path / "vit" / "20261127-143243-2") == "vit/20261127-143243-2"
    assert run_label(tmp_path / "runs" / "heads=4,seed=0") == "heads=4,seed=0"  # a named run keeps its name


@pytest.mark.parametrize("normalization", [[], ["data.mean=[0.485,0.456,0.406]", "data.std=[0.229,0.224,0.225]"]])
def test_an_image_is_drawn_in_its_own_colours(normalization, tmp_path, monkeypatch):
    # each channel was stretched to [0, 1] on its own: a red circle on a dark ground was drawn pink on teal, a green
    # square on dark green yellow on blue, and an image of one colour black
    import numpy as np
    from PIL import Image

    import attnzoo.viz as viz

    rng = np.random.default_rng(0)
    data = tmp_path / "data"
    for name, colour in (("red", (200, 30, 40)), ("green", (40, 160, 60))):
        (data / name).mkdir(parents=True)
        for i in range(6):
            img = np.zeros((32, 32, 3), dtype=np.uint8)
            img[:] = (30, 40, 50)
            y, x = rng.integers(0, 16, 2)
            img[y : y + 16, x : x + 16] = colour
            Image.fromarray(img).save(data / name / f"{i}.png")
    given = ["data.dataset=folder", f"data.root={data}", *TINY, "model.patch_size=8", "data.ink=false"]
    (tmp_path / "run").mkdir()
    run = _saved_run(tmp_path / "run", VIT, [*given, *normalization, "run.baseline=false"])
    pixels = np.zeros((32, 32, 3), dtype=np.uint8)
    pixels[:] = (30, 40, 50)
    pixels[8:24, 8:24] = (200, 30, 40)
    Image.fromarray(pixels).save(tmp_path / "circle.png")
    Image.fromarray(np.full((32, 32, 3), (40, 160, 60), dtype=np.uint8)).save(tmp_path / "plain.png")
    drawn = []
    real = viz.plot_rollout
    draw = lambda r, canvas, *a, **k: drawn.append(canvas) or real(r, canvas, *a, **k)  # noqa: E731
    monkeypatch.setattr(viz, "plot_rollout", draw)
    for name in ("circle", "plain"):
        assert main([str(run), "--input", str(tmp_path / f"{name}.png"), "--out", str(tmp_path / name)]) == 0
    circle, plain = (c.background for c in drawn)
    np.testing.assert_allclose(circle, pixels / 255, atol=2 / 255)  # 32 px: not resized
    np.testing.assert_allclose(plain, np.broadcast_to(np.array([40, 160, 60]) / 255, (32, 32, 3)), atol=2 / 255)


def test_an_image_without_its_normalization_is_stretched_alike_in_every_channel():
    from attnzoo.drawing.matrices import image_canvas

    image = torch.zeros(3, 4, 4)
    image[0], image[1] = 1.0, -1.0  # red: the first channel high, the others low
    shown = image_canvas(image, (2, 2)).background
    assert shown[..., 0].min() == 1.0 and shown[..., 1].max() == 0.0 and (shown[..., 2] == 0.5).all()


def test_an_example_of_a_moved_image_folder_is_drawn_where_it_is_now(tmp_path, capsys):
    # viz --index of a run whose folder moved could only be told to put the data back: data.root=<new> was refused
    data = _image_folder(tmp_path / "data")
    run = tmp_path / "run"
    run.mkdir()
    _saved_run(run, VIT, ["data.dataset=folder", f"data.root={data}", *TINY, "model.patch_size=8",
                          "run.baseline=false"])  # fmt: skip
    data.rename(tmp_path / "moved")
    assert main([str(run), "--index", "1", "--out", str(tmp_path / "out")]) == 2
    assert "`viz <run> data.root=<folder>` draws its examples" in capsys.readouterr().err
    assert main([str(run), "--index", "0", f"data.root={tmp_path / 'moved'}", "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "rollout.png").is_file()
    with pytest.raises(SystemExit):
        main([str(run), "model.depth=3"])
    assert "viz takes data.* overrides" in capsys.readouterr().err


def test_a_title_holding_dollar_signs_is_drawn_as_written_not_as_mathtext(tmp_path):
    # viz --text puts the user's text in the title: "a_b $\frac{$" stopped viz, "$5 and $6" lost its dollar signs
    from attnzoo.drawing.matrices import _pyplot, save_figure

    fig = _pyplot().figure(figsize=(3, 2))
    fig.add_subplot(1, 1, 1)
    path = save_figure(fig, tmp_path / "t.png", "text: a_b $\\frac{$ costs $5 and $6")
    assert path.stat().st_size > 0 and fig._suptitle.get_text().count("\\$") == 4

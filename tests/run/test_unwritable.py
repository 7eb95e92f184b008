"""What cannot be written is a clear error, never a traceback: a read-only run directory under `evaluate` (the
metrics are printed first) and `viz`, and a full disk (ENOSPC) when the lock or a checkpoint is written (no lock or
empty run directory left behind). The tests run as any user (also root, whom permissions do not stop): the failing
write is made to fail as the file system would."""

import builtins
import errno
import os
import tempfile
from pathlib import Path

import pytest

from attnzoo.config import ConfigError, load
from attnzoo.run import fit

ROOT = Path(__file__).resolve().parents[2]
VIT = ROOT / "recipes" / "vit.yaml"
TINY = [
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "trainer.accelerator=cpu",
    "trainer.devices=1",
    "trainer.precision=32-true",
    "trainer.num_threads=1",
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=1",
    "trainer.limit_test_batches=1",
    "trainer.num_sanity_val_steps=0",
    "model.embed_dim=16",
    "model.depth=1",
    "model.num_heads=2",
    "model.patch_size=7",
    "model.mlp_ratio=1.0",
    "data.batch_size=8",
    "run.test=false",
]


@pytest.fixture(scope="module")
def vit_run(tmp_path_factory) -> Path:
    return fit(load([VIT], [*TINY, f"run.dir={tmp_path_factory.mktemp('runs')}"]))


def _read_only(monkeypatch, directory: Path) -> None:
    """Writes under `directory` fail as on a read-only mount (EROFS)."""

    def refuse(path) -> None:
        if Path(os.path.abspath(path)).is_relative_to(directory.resolve()):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    real_open, real_path_open, real_mkdir = builtins.open, Path.open, Path.mkdir

    def open_(file, mode="r", *args, **kwargs):
        if isinstance(file, str | os.PathLike) and any(c in mode for c in "wax+"):
            refuse(file)
        return real_open(file, mode, *args, **kwargs)

    def path_open(self, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+"):
            refuse(self)
        return real_path_open(self, mode, *args, **kwargs)

    def mkdir(self, *args, **kwargs):
        if not self.is_dir():
            refuse(self)
        return real_mkdir(self, *args, **kwargs)

    real_mkstemp = tempfile.mkstemp

    def mkstemp(*args, dir=None, **kwargs):  # files written whole (attnzoo.util.files.write_json) start here
        if dir is not None:
            refuse(Path(dir) / "new")
        return real_mkstemp(*args, dir=dir, **kwargs)

    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(Path, "open", path_open)
    monkeypatch.setattr(Path, "mkdir", mkdir)
    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


def test_evaluate_on_a_read_only_run_dir_prints_the_metrics_then_says_what_it_could_not_write(
    vit_run, monkeypatch, capsys
):
    from attnzoo.evaluate import main as evaluate

    _read_only(monkeypatch, vit_run)
    assert evaluate([str(vit_run), "--checkpoint", "last"]) == 1
    captured = capsys.readouterr()
    assert "test/acc" in captured.out and "Traceback" not in captured.err
    assert f"could not write the report {vit_run / 'evaluate-last.json'}: Read-only file system" in captured.err
    assert not (vit_run / "evaluate-last.json").exists()


def test_viz_on_a_read_only_run_dir_says_what_it_could_not_write(vit_run, monkeypatch, capsys):
    from attnzoo.viz import main as viz

    _read_only(monkeypatch, vit_run)
    assert viz([str(vit_run), "--checkpoint", "last"]) == 1
    err = capsys.readouterr().err
    assert f"could not write {vit_run / 'viz'}" in err and "give --out DIR somewhere writable" in err


def test_a_full_disk_when_taking_the_lock_leaves_no_lock_and_no_run_dir(tmp_path, monkeypatch):
    import attnzoo.run.lock as lock

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(lock, "_write_record", full)
    with pytest.raises(ConfigError, match=r"cannot write .*\.lock: No space left on device"):
        fit(load([VIT], [*TINY, f"run.dir={tmp_path / 'runs'}"]))
    assert not list((tmp_path / "runs" / "vit").iterdir())  # the run dir it made is gone, and its .lock with it
    run_dir = tmp_path / "given"
    run_dir.mkdir()
    with pytest.raises(ConfigError, match="No space left on device"):
        fit(load([VIT], TINY), run_dir=run_dir)
    assert not (run_dir / ".lock").exists()


def test_a_full_disk_when_writing_a_checkpoint_is_a_clear_error(tmp_path, monkeypatch, capsys):
    from attnzoo.fit import main
    from attnzoo.run.checkpoint_io import AtomicCheckpointIO

    def full(self, checkpoint, path, storage_options=None):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(AtomicCheckpointIO, "save_checkpoint", full)
    assert main(["--config", str(VIT), *TINY, f"run.dir={tmp_path}"]) == 1
    err = capsys.readouterr().err
    assert "attnzoo fit: error: could not write" in err and "No space left on device" in err
    assert "Traceback" not in err


def test_metrics_csv_gaining_a_column_on_a_full_disk_keeps_the_rows_it_had(tmp_path, monkeypatch):
    """Lightning rewrites metrics.csv in place when a column appears (the first validation, the test pass): a full
    disk then left it cut short, the rows logged before lost."""
    import errno

    from attnzoo.run.metrics import _KeepingWriter

    writer = _KeepingWriter(str(tmp_path))
    for step in range(3):
        writer.log_metrics({"train/loss": 1.0 / (step + 1)}, step=step)
        writer.save()
    before = (tmp_path / "metrics.csv").read_text()
    real_open = writer._fs.open

    def full_disk(path, mode="rb", **kwargs):
        f = real_open(path, mode, **kwargs)
        if "w" in mode:  # opened (and so emptied), then nothing fits

            def write(*args):
                raise OSError(errno.ENOSPC, "No space left on device")

            f.write = write
        return f

    monkeypatch.setattr(writer._fs, "open", full_disk)
    writer.log_metrics({"val/acc": 0.5}, step=2)
    with pytest.raises(OSError, match="No space left"):
        writer.save()
    assert (tmp_path / "metrics.csv").read_text() == before and [p.name for p in tmp_path.iterdir()] == ["metrics.csv"]

"""Where a new run goes: `run.name` names a directory inside `run.dir`, never a path that leaves it."""

from pathlib import Path

import pytest

from attnzoo.config import ConfigError, load
from attnzoo.run import fit, new_run_dir

ROOT = Path(__file__).resolve().parents[2]
VIT = ROOT / "recipes" / "vit.yaml"


@pytest.mark.parametrize("name", ["../../x", "/tmp/attnzoo-elsewhere", "a/../../b", "."])
def test_a_run_name_that_leaves_run_dir_is_refused_before_anything_is_written(tmp_path, name):
    runs = tmp_path / "deep" / "runs"
    cfg = load([VIT], [f"run.dir={runs}", f"run.name={name}"])
    with pytest.raises(ConfigError, match=r"run.name: .* must name a directory inside run.dir .*set run.dir"):
        fit(cfg)
    assert not list(tmp_path.iterdir()) and not Path("/tmp/attnzoo-elsewhere").exists()


def test_a_nested_run_name_stays_inside_run_dir(tmp_path):
    cfg = load([VIT], [f"run.dir={tmp_path}", "run.name=study/vit-small"])
    assert new_run_dir(cfg).parent == tmp_path / "study" / "vit-small"


def test_runs_started_in_the_same_second_claim_their_own_directories(tmp_path, monkeypatch):
    import datetime
    import types

    from attnzoo.run import rundir

    class Frozen(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(2026, 11, 26, 12, 0, 0)

    monkeypatch.setattr(rundir, "datetime", types.SimpleNamespace(datetime=Frozen))  # every call in one second
    cfg = load([VIT], [f"run.dir={tmp_path}"])
    first, second = new_run_dir(cfg, claim=True), new_run_dir(cfg, claim=True)
    assert first.name == "20261126-120000" and second.name == "20261126-120000-1"
    assert first.is_dir() and second.is_dir() and not any(first.iterdir())  # claimed: created, nothing in them
    assert new_run_dir(cfg) == first.parent / "20261126-120000-2"  # without claim: the next free name, not created

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

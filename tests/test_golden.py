"""The golden-file helper: a missing golden fails, and nothing is written without ``--update-golden``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import golden


@pytest.fixture
def updating_off():
    before = golden.updating()
    golden.set_updating(False)
    yield
    golden.set_updating(before)


def test_a_missing_golden_fails_and_is_not_written(tmp_path: Path, updating_off) -> None:
    path = tmp_path / "job.yaml"
    with pytest.raises(pytest.fail.Exception, match="missing.*--update-golden"):
        golden.text(path, "kind: PyTorchJob\n")
    assert not path.exists()


def test_a_golden_is_only_read_without_the_flag(tmp_path: Path, updating_off) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("old\n")
    assert golden.text(path, "new\n") == "old\n"
    assert path.read_text() == "old\n"


def test_the_flag_writes_the_current_output(tmp_path: Path, updating_off) -> None:
    path = tmp_path / "job.yaml"
    golden.set_updating(True)
    assert golden.text(path, "new\n") == "new\n"
    assert golden.text(path) == "new\n"  # no current value: read only


def test_the_flag_is_registered(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.getoption(golden.UPDATE_OPTION) is False

"""The container's first process (devcluster.agent.exec): a volume mounted over a parent of the image's folders
(an emptyDir on /tmp, with the repository and its virtual environment cloned under /tmp) leaves the image's files
where they were, as a container image's files stay whatever volume a pod mounts beside them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="mount namespaces need root and unshare(1)"
)


def _run(tmp_path: Path, image: list[str]) -> subprocess.CompletedProcess[str]:
    tree = tmp_path / "tree"  # stands for /tmp: the image lives under it, a volume is mounted on it
    (tree / "clone" / "repo").mkdir(parents=True)
    (tree / "clone" / "repo" / "marker").write_text("image file\n")
    volume = tmp_path / "volume"  # the pod's emptyDir on the node
    volume.mkdir()
    (volume / "scratch").write_text("volume file\n")
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "argv": ["/bin/sh", "-c", f"cat {tree}/scratch; cat {tree}/clone/repo/marker"],
                "env": {"PATH": "/usr/bin:/bin"},
                "workingDir": "/",
                "hostname": "",
                "mounts": [[str(volume), str(tree), False, False]],
                "image": image,
            }
        )
    )
    return subprocess.run(
        ["unshare", "--mount", sys.executable, "-m", "devcluster.agent.exec", str(spec)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT)},
    )


def test_an_image_folder_under_a_volume_stays_visible(tmp_path: Path) -> None:
    done = _run(tmp_path, [str(tmp_path / "tree" / "clone" / "repo")])
    assert done.returncode == 0, done.stderr
    assert done.stdout == "volume file\nimage file\n"


def test_without_the_image_folder_the_volume_hides_it(tmp_path: Path) -> None:
    # the check above can fail: a volume on a parent does hide what the image list does not name
    done = _run(tmp_path, [])
    assert done.returncode != 0
    assert done.stdout == "volume file\n"
    assert "No such file" in done.stderr


def test_down_keeps_a_mount_point_another_namespace_still_uses(tmp_path: Path) -> None:
    # two clusters share the node's mount points (the service-account token folder): one cluster's `down` must not
    # remove a folder that a container of the other still has a volume on (the rmdir would unmount it there)
    from devcluster.cluster import _unmount_and_unmake, mount_points_in_use

    state = tmp_path / "state"
    state.mkdir()
    shared, unused = tmp_path / "node" / "shared", tmp_path / "node" / "unused"
    shared.mkdir(parents=True)
    unused.mkdir()
    (state / "mountpoints.txt").write_text(f"{shared}\n{unused}\n")
    holder = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         f"mount -t tmpfs none {shared} && echo up && exec sleep 60"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "up"
        assert str(shared) in mount_points_in_use() and str(unused) not in mount_points_in_use()
        assert _unmount_and_unmake(state) == 1
        assert shared.is_dir() and not unused.exists()
    finally:
        holder.kill()
        holder.wait(timeout=10)
        if holder.stdout is not None:
            holder.stdout.close()

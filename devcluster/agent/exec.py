"""The first process of a container, which becomes the container's command.

The node agent starts `ip netns exec <pod's namespace> python -m devcluster.agent.exec <spec.json>`; `ip netns exec`
gives it the pod's network namespace and a mount namespace of its own (where the pod's `/etc/netns/<ns>/` files
stand over `/etc/resolv.conf`, `/etc/hosts` and `/etc/hostname`). Here it makes that mount namespace private,
mounts the container's volumes at their paths (the pod's folders, bound as the kubelet binds them), then replaces
itself with the container's command: the process the agent started is the container's main process, so a SIGTERM to
it reaches the command itself, as a container runtime's does.

It also gives the container a UTS namespace named as the pod (a runtime's sandbox does). The spec (written by the
agent) is JSON: argv, env, workingDir, hostname, mounts ([source, target, readOnly, isFile]), image (the folders
that stand for the container's image: bound again over any volume mounted on one of their parents).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import sys

MS_RDONLY = 0x1
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
CLONE_NEWUTS = 0x04000000

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]


def _mount(source: str | None, target: str, fstype: str | None, flags: int) -> None:
    rc = _libc.mount(
        source.encode() if source else None, target.encode(), fstype.encode() if fstype else None, flags, None
    )
    if rc != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {source} -> {target}: {os.strerror(errno)}")


def _mount_point(target: str, is_file: bool) -> None:
    if os.path.lexists(target):
        return
    os.makedirs(os.path.dirname(target) or "/", exist_ok=True)
    if is_file:
        open(target, "a").close()
    else:
        os.makedirs(target, exist_ok=True)


def _own_hostname(name: str) -> None:
    """A UTS namespace of the container's own, named as the pod: `gethostname()` answers the pod's name, which the
    pod's /etc/hosts maps to its address (gloo and NCCL look their own host up by it)."""
    if _libc.unshare(CLONE_NEWUTS) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"unshare(CLONE_NEWUTS): {os.strerror(errno)}")
    raw = name.encode()
    if _libc.sethostname(raw, len(raw)) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"sethostname({name!r}): {os.strerror(errno)}")


def _under(path: str, parent: str) -> bool:
    parent = os.path.normpath(parent)
    return path != parent and path.startswith(parent.rstrip(os.sep) + os.sep)


def _keep_image(image: list[tuple[int, str]], targets: list[str]) -> None:
    """Bind each image folder (opened before the volumes were mounted) at its own path again where a volume's
    mount now hides it; shallowest first, so a folder inside another is bound after it."""
    for fd, path in sorted(image, key=lambda item: len(item[1].split(os.sep))):
        if any(_under(path, target) for target in targets):
            _mount_point(path, False)
            _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        os.close(fd)


def main(spec_file: str) -> None:
    with open(spec_file) as f:
        spec = json.load(f)
    if spec.get("hostname"):
        _own_hostname(spec["hostname"])
    # nothing mounted here may reach the host's mount table
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    # every source is opened before the first mount: a volume mounted over /tmp must not hide the node's folders of
    # the volumes after it (a runtime resolves its mounts' sources first, too); parents are mounted before children
    mounts = sorted(spec["mounts"], key=lambda m: len(os.path.normpath(m[1]).split(os.sep)))
    image = [(os.open(p, os.O_PATH | os.O_CLOEXEC), p) for p in spec.get("image", []) if os.path.isdir(p)]
    held = [
        (os.open(source, os.O_PATH | os.O_CLOEXEC), target, read_only, is_file)
        for source, target, read_only, is_file in mounts
    ]
    for fd, target, read_only, is_file in held:
        _mount_point(target, is_file)
        _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
        if read_only:
            _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
        os.close(fd)
    _keep_image(image, [m[1] for m in mounts])
    workdir = spec.get("workingDir") or "/"
    try:
        os.chdir(workdir)
    except OSError as e:
        print(f"devcluster: the container's workingDir {workdir!r}: {e.strerror}", file=sys.stderr)
        sys.exit(128)
    argv = spec["argv"]
    env = spec["env"]
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as e:
        # what a runtime reports as StartError: the command is not there or cannot run
        print(f"devcluster: exec {argv[0]!r}: {e.strerror}", file=sys.stderr)
        sys.exit(127 if isinstance(e, FileNotFoundError) else 126)


if __name__ == "__main__":
    main(sys.argv[1])

"""`pytorchjob render`: print the PyTorchJob a `pytorch` task becomes, with no cluster and no Flyte backend.

Two sources::

    pytorchjob render train.py train_mnist            # a task in a Python file, serialized like `pyflyte package`
    pytorchjob render --template task.pb              # a serialized TaskTemplate / TaskSpec (.pb), JSON, or
    pytorchjob render --template flyte-package.tgz train_mnist   # a `pyflyte package` archive (task picked by name)

The output is the exact object the connector would create (the same pure builder), ready for `kubectl apply -f -`.
Flyte's placeholders (`{{.input}}`, `{{.outputPrefix}}`, ...) are filled with `--inputs`, `--output-prefix`,
`--raw-output-prefix`, `--checkpoint-prefix` and `--prev-checkpoint`; by default they point under
`s3://my-s3-bucket/pytorchjob-render/<job name>/` (the Flyte sandbox bucket). The job then runs the task's code
with the inputs found there, so upload an `inputs.pb` first or pass your own paths.
`python -m backend_plugin render ...` is the same command.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import sys
import tarfile
from collections import OrderedDict
from pathlib import Path
from typing import Any, Optional

import yaml

from backend_plugin.builder import ExecutionMetadata, TemplateError, build_pytorchjob, job_name, template_to_dict
from backend_plugin.config import BackendConfig, ConfigError, load_config

__all__ = ["main", "render", "load_task_template", "load_template_file"]

DEFAULT_BUCKET = "s3://my-s3-bucket/pytorchjob-render"


class RenderError(Exception):
    """A problem with the command's inputs (file, task name); printed without a traceback."""


def load_task_template(path: str, task_name: str, image: Optional[str] = None) -> dict[str, Any]:
    """Import a Python file by path, find the task `task_name`, and serialize it as `pyflyte package` would.

    Args:
        path: the `.py` file.
        task_name: the attribute name of the decorated task in that file.
        image: the container image (`pyflyte package --image`); flytekit's default image when None.

    Returns:
        The TaskTemplate as a protobuf-JSON dict.

    Raises:
        RenderError: the file does not exist or has no such task.
    """
    from flytekit.configuration import Image, ImageConfig, SerializationSettings
    from flytekit.core.base_task import PythonTask
    from flytekit.tools.translator import get_serializable

    file = Path(path).resolve()
    if not file.is_file():
        raise RenderError(f"{path}: no such file")
    module_name = _module_name(file)
    root = file.parent
    for _ in module_name.split(".")[1:]:
        root = root.parent
    sys.path.insert(0, str(root))
    try:
        spec = importlib.util.spec_from_file_location(module_name, file)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(root))
    entity = getattr(module, task_name, None)
    if not isinstance(entity, PythonTask):
        tasks = sorted(k for k, v in vars(module).items() if isinstance(v, PythonTask))
        raise RenderError(f"{path}: no task named {task_name!r}; tasks in this file: {tasks}")
    if image:
        image_config = ImageConfig(default_image=Image.look_up_image_info("default", image))
    else:
        image_config = ImageConfig.auto_default_image()
    settings = SerializationSettings(image_config=image_config)  # like `pyflyte package`: no project/domain yet
    task_spec = get_serializable(OrderedDict(), settings, entity)
    return template_to_dict(task_spec.template)


def _module_name(file: Path) -> str:
    """Dotted module name: relative to the innermost directory above that is not a package (like pyflyte)."""
    parts = [file.stem]
    parent = file.parent
    while (parent / "__init__.py").exists():
        parts.insert(0, parent.name)
        parent = parent.parent
    return ".".join(parts)


def load_template_file(path: str, task_name: Optional[str] = None) -> dict[str, Any]:
    """Read a serialized task: TaskTemplate or admin TaskSpec (`.pb`), JSON of either, or a `pyflyte package` tgz.

    Args:
        path: the file.
        task_name: for an archive with several pytorch tasks, the one to pick (matches the end of its name).

    Returns:
        The TaskTemplate as a protobuf-JSON dict.

    Raises:
        RenderError: unreadable file, no pytorch task, or an ambiguous archive.
    """
    file = Path(path)
    if not file.is_file():
        raise RenderError(f"{path}: no such file")
    data = file.read_bytes()
    if file.suffix == ".json":
        try:
            doc = json.loads(data)
        except json.JSONDecodeError as e:
            raise RenderError(f"{path}: not JSON: {e}") from e
        return template_to_dict(doc["template"] if isinstance(doc, dict) and "template" in doc else doc)
    if data[:2] == b"\x1f\x8b":  # gzip: a `pyflyte package` archive
        return _from_archive(path, data, task_name)
    template = _from_pb(data)
    if template is None:
        raise RenderError(f"{path}: neither a TaskTemplate nor a TaskSpec with a container or pod template")
    return template


def _from_pb(data: bytes) -> Optional[dict[str, Any]]:
    """`pyflyte package` writes admin TaskSpec (`<i>_<name>_1.pb`); SDKs and tests write bare TaskTemplates."""
    from flyteidl.admin import task_pb2
    from flyteidl.core import tasks_pb2
    from google.protobuf.message import DecodeError

    def usable(t: Any) -> bool:
        return bool(t.type) and bool(t.id.name) and (t.HasField("container") or t.HasField("k8s_pod"))

    for wrapper in (task_pb2.TaskSpec, tasks_pb2.TaskTemplate):
        msg = wrapper()
        try:
            msg.ParseFromString(data)
        except DecodeError:
            continue
        template = msg.template if wrapper is task_pb2.TaskSpec else msg
        if usable(template):
            return template_to_dict(template)
    return None


def _from_archive(path: str, data: bytes, task_name: Optional[str]) -> dict[str, Any]:
    found: dict[str, dict[str, Any]] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            if not (member.isfile() and member.name.endswith("_1.pb")):
                continue
            reader = tar.extractfile(member)
            template = _from_pb(reader.read()) if reader else None
            if template is not None and template.get("type") == "pytorch":
                found[template["id"]["name"]] = template
    if task_name:
        found = {k: v for k, v in found.items() if k == task_name or k.endswith(f".{task_name}")}
    if len(found) != 1:
        what = "no pytorch task" if not found else f"several pytorch tasks {sorted(found)}; name one"
        raise RenderError(f"{path}: {what}" + (f" matching {task_name!r}" if task_name and not found else ""))
    return next(iter(found.values()))


def render(template: dict[str, Any], args: argparse.Namespace, config: BackendConfig) -> str:
    """Build the job for `template` with the command-line's metadata and return it as YAML.

    Args:
        template: the TaskTemplate dict.
        args: parsed arguments (namespace, name, image, paths).
        config: backend config.

    Returns:
        One YAML document.

    Raises:
        TemplateError: the template is not a valid pytorch task.
    """
    task = (template.get("id") or {}).get("name", "task").rsplit(".", 1)[-1]
    name = args.name or job_name("render", "local", task, "n0", 0, prefix=config.job_name_prefix)
    base = f"{DEFAULT_BUCKET}/{name}"
    meta = ExecutionMetadata(
        namespace=args.namespace or config.namespace,
        job_name=name,
        image_override=args.image,
        input_path=args.inputs or f"{base}/inputs.pb",
        output_prefix=args.output_prefix or f"{base}/outputs",
        raw_output_prefix=args.raw_output_prefix or f"{base}/raw",
        checkpoint_prefix=args.checkpoint_prefix or f"{base}/checkpoints",
        prev_checkpoint_prefix=args.prev_checkpoint or "",
    )
    job = build_pytorchjob(template, meta, config)
    return yaml.safe_dump(job, sort_keys=False, width=120)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pytorchjob", description="Tools for the PyTorchJob backend of Flyte.")
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser(
        "render",
        help="print the PyTorchJob YAML of a pytorch task",
        description="Print the PyTorchJob a pytorch task becomes (the connector's exact object). "
        "Either FILE.py TASK, or --template FILE [TASK].",
    )
    r.add_argument("source", nargs="?", help="Python file with the task (omit with --template)")
    r.add_argument("task", nargs="?", help="task name (attribute in the file, or in a pyflyte package archive)")
    r.add_argument("--template", help="serialized task: TaskTemplate/TaskSpec .pb, JSON, or pyflyte package .tgz")
    r.add_argument("--namespace", help="metadata.namespace (default: the config's namespace)")
    r.add_argument("--name", help="metadata.name (default: derived from the task name)")
    r.add_argument("--image", help="image for replicas without their own (and for serializing FILE.py)")
    r.add_argument("--config", help="backend config YAML (default: PYTORCHJOB_CONFIG / PYTORCHJOB_* env)")
    r.add_argument("--inputs", help="value of {{.input}} (default: <bucket>/<name>/inputs.pb)")
    r.add_argument("--output-prefix", help="value of {{.outputPrefix}}")
    r.add_argument("--raw-output-prefix", help="value of {{.rawOutputDataPrefix}}")
    r.add_argument("--checkpoint-prefix", help="value of {{.checkpointOutputPrefix}}")
    r.add_argument("--prev-checkpoint", help="value of {{.prevCheckpointPrefix}} (default: empty)")
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    """Console entry point `pytorchjob`.

    Args:
        argv: arguments without the program name; `sys.argv[1:]` when None.

    Returns:
        0 on success, 2 for bad input (message on stderr, no traceback).
    """
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        config = BackendConfig.from_yaml(Path(args.config)) if args.config else load_config()
        if args.template:
            if args.task is not None:
                parser.error("with --template give at most one positional argument (the task name)")
            template = load_template_file(args.template, args.source)
        else:
            if not args.source or not args.task:
                parser.error("give FILE.py TASK, or --template FILE")
            template = load_task_template(args.source, args.task, args.image)
        sys.stdout.write(render(template, args, config))
    except (RenderError, TemplateError, ConfigError, OSError) as e:
        print(f"pytorchjob render: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

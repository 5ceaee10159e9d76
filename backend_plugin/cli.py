"""`pytorchjob render`: print the job a `pytorch` task becomes, with no cluster and no Flyte backend.

Two sources::

    pytorchjob render train.py train_mnist            # a task in a Python file, serialized like `pyflyte package`
                                                      # (a Flyte 2 task: by its front-end, `flyte2` extra)
    pytorchjob render --template task.pb              # a serialized TaskTemplate / TaskSpec (.pb), JSON, or
    pytorchjob render --template flyte-package.tgz train_mnist   # a `pyflyte package` archive (task picked by name)
    pytorchjob render --target trainjob train.py train_mnist      # another job kind than the config's target

The output is the exact object the connector would create (the one build path, `build.build_job`: the same reader,
plan, writer, `pytorch.flyte.org/spec-sha256` stamp and admission model, with the same execution metadata), ready
for `kubectl create -f -` (docs/admission.md says why `kubectl apply` fails on jobs over about 256 KiB).
`metadata.namespace` is written only when `--namespace` is given, so `kubectl create -n NS -f job.yaml` works.
Every job is put through the admission model (`backend_plugin.admission`): one the cluster would reject, silently
prune or never start is refused with one line per problem naming the setting; `--check` prints the whole report
instead of the job (exit 0 when the cluster would admit it intact, 1 when not). `--crd FILE` takes the cluster's
installed CRD of the kind (`kubectl get crd <plural>.<group> -o yaml`): the job is fitted to it and judged by it, as
the connector does with the CRD it reads, so the YAML is what that cluster accepts (or the refusal is the one the
connector would give).

Flyte's placeholders (`{{.input}}`, `{{.outputPrefix}}`, ...) are filled with `--inputs`, `--output-prefix`,
`--raw-output-prefix`, `--checkpoint-prefix` and `--prev-checkpoint`; by default they follow the connector's layout
under the output prefix `s3://my-s3-bucket/pytorchjob-render/<job name>` (the Flyte sandbox bucket):
`<prefix>/inputs.pb`, `<prefix>/raw_output`, `<prefix>/checkpoint_output`. The job then runs the task's code with
the inputs found there.

`--input name=value` (repeatable) writes that `inputs.pb`: each value is converted to a Flyte literal with the task's
interface (flytekit's type engine, as `pyflyte run` does), the literal map is written to `--inputs-to` (a local folder,
or a URL such as `s3://bucket/run-1` written through flytekit's data persistence; default: the `--output-prefix`), and
the job's `{{.input}}` points at it. A job whose image is flytekit's default image (no torch, no plugin) gets a warning
on stderr, and so does a job that still reads or writes under the placeholder bucket. Stdout holds only the job: what
the user's module prints while it is imported and serialized goes to stderr. `--name`, `--image` and `--namespace` are
checked with the rules the backend and the SDK apply to the same fields, before the module is imported.
A Flyte placeholder the render cannot fill (`{{ .remote_package_path }}` of a fast-registered package, filled
when the task is registered) gets a warning naming it and what fills it. Every error is one line on stderr: a
syntax error or an exception while importing the user's file names the file and line.
`python -m backend_plugin render ...` is the same command.

A flytekit task is serialized here with flytekit (as `pyflyte package` does). A task of another SDK is serialized by
its front-end, found through the entry point group `FRONTENDS` (each entry named for the SDK's top-level module, and
asked only once the user's file has loaded that SDK): the backend imports no front-end.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import io
import json
import os
import re
import sys
import tarfile
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import yaml

from backend_plugin.admission import CEL_UNAVAILABLE, NOTE, Problem, job_size
from backend_plugin.admission.installed import InstalledCrd, read_crd_file
from backend_plugin.build import BuiltJob, build_job
from backend_plugin.config import ENV_PREFIX, PROGRAM, BackendConfig, load_config
from backend_plugin.errors import ConfigError, TemplateError
from backend_plugin.execution import ExecutionIdentity, ExecutionMetadata, execution_metadata, job_name
from backend_plugin.kinds import declaration_for
from backend_plugin.targets.registry import BY_CONFIG, KINDS, JobTarget, target_for_config
from backend_plugin.template import template_to_dict
from pytorch_contract import template_keys as keys
from pytorch_contract.install import install_hint
from pytorch_contract.k8s_metadata import ANNOTATIONS_TOTAL_MAX_BYTES
from pytorch_contract.k8s_names import DNS1035_LABEL, image_reference_problem
from pytorch_contract.suggest import closest, did_you_mean
from pytorch_contract.template_keys import CONNECTOR_TASK_TYPE, TASK_TYPE

__all__ = [
    "main",
    "render",
    "load_task",
    "load_task_template",
    "serialize_task",
    "load_template_file",
    "parse_inputs",
    "input_literals",
    "write_inputs",
    "default_image_warnings",
    "placeholder_warnings",
    "check_job_options",
    "check_file",
    "check_path_options",
    "user_output_to_stderr",
    "unfilled_placeholder_warnings",
    "check_report",
    "refused_report",
    "flytekit_image",
    "generated_name_problem",
    "native_plugin_warnings",
    "client_side_apply_note",
]

DEFAULT_BUCKET = f"s3://my-s3-bucket/{PROGRAM}-render"
FLYTEKIT_DEFAULT_IMAGE = "cr.flyte.org/flyteorg/flytekit:"
"""Prefix of flytekit's default images (`DefaultImages`), what a task without `container_image` serializes with."""
FLYTE2_DEFAULT_IMAGE = "ghcr.io/flyteorg/flyte:"
"""Prefix of Flyte 2's default images, what a task of a `flyte.TaskEnvironment` without `image` serializes with."""
FRONTENDS = "flytekitplugins_pytorch.frontends"
"""The entry point group of the front-ends that serialize their own tasks: each entry is named for its SDK's
top-level module (`flyte`) and loads a module with `owns(entity)`, `task_template(entity, root_dir=...)` (the task's
template as protobuf JSON) and `inputs_message(entity, given)` (the inputs its pods read)."""


class RenderError(Exception):
    """A problem with the command's inputs (file, task name); printed without a traceback."""


@contextlib.contextmanager
def user_output_to_stderr() -> Iterator[None]:
    """Send whatever the user's code prints to stderr, so that stdout holds only the job.

    Python's `sys.stdout` is redirected, and so is file descriptor 1 (a C extension's `printf`, a subprocess
    started at import); C's stdio buffers are flushed before fd 1 is given back, so text a C library buffered
    lands on stderr too.

    Yields:
        Nothing; stdout is restored on exit.
    """
    sys.stdout.flush()
    try:
        saved: Optional[int] = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # no fd 1 (closed by the caller): only Python's stream can be redirected
        saved = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        if saved is not None:
            _flush_c_stdio()
            os.dup2(saved, 1)
            os.close(saved)


def _flush_c_stdio() -> None:
    """`fflush(NULL)`: write out what C code buffered for stdout while fd 1 was stderr."""
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):  # no C library to load (not on Linux or macOS): nothing to flush
        pass


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
    return serialize_task(load_task(path, task_name), image)


def serialize_task(entity: Any, image: Optional[str] = None) -> dict[str, Any]:
    """Serialize a flytekit task as `pyflyte package` would, or another SDK's task with its front-end.

    A Flyte 2 task's template comes from its front-end (`FRONTENDS`) as Flyte 2 serializes it; the reader reads
    its dialect. Its type is kept (`pytorch`, or `pytorch-job` for a task routed to the connector).

    Args:
        entity: the task.
        image: the container image; flytekit's default image when None. A Flyte 2 task serializes with its
            environment's image: `--image` replaces it in the job (`ExecutionMetadata.image_override`), as it
            replaces a flytekit task's `container_image`.

    Returns:
        The TaskTemplate as a protobuf-JSON dict.

    Raises:
        RenderError: flytekit, the front-end or the user's code failed while serializing it (one line, no traceback).
    """
    frontend = _frontend_of(entity)
    if frontend is not None:
        return _serialize_by(frontend, entity)
    from flytekit.configuration import Image, ImageConfig, SerializationSettings
    from flytekit.tools.translator import get_serializable

    if image:
        image_config = ImageConfig(default_image=flytekit_image(Image, image))
    else:
        image_config = ImageConfig.auto_default_image()
    settings = SerializationSettings(image_config=image_config)  # like `pyflyte package`: no project/domain yet
    with user_output_to_stderr():  # serializing can run the user's code (pod templates, ImageSpec)
        try:
            task_spec = get_serializable(OrderedDict(), settings, entity)
        except (RenderError, TemplateError, ConfigError, ModuleNotFoundError):
            raise
        except Exception as e:  # flytekit and the user's code raise anything here: one line, no traceback
            name = getattr(entity, "name", "the task")
            raise RenderError(f"{name}: cannot be serialized: {type(e).__name__}: {e}") from None
    return template_to_dict(task_spec.template)


def flytekit_image(image_class: Any, image: str) -> Any:
    """flytekit's default `Image` for `--image`, without flytekit's parser (`Image.look_up_image_info`, which asserts
    a tag and reads a file of that name as an ImageSpec). A reference without a tag or digest (`ubuntu`,
    `localhost:5000/x`) is the kubelet's `:latest` (distribution/reference's default tag), as the decorator's
    `container_image="ubuntu"` is; the job keeps the reference as given (`ExecutionMetadata.image_override`).

    Args:
        image_class: `flytekit.configuration.Image`.
        image: the checked reference (`check_job_options`).

    Returns:
        The `Image`.

    Raises:
        RenderError: flytekit refuses it (one line).
    """
    fqn, at, digest = image.rpartition("@")
    tag = None
    if not at:  # no digest: a tag after the last '/', else the kubelet's default
        fqn, digest = image, ""
        head, colon, tail = image.rpartition(":")
        if colon and "/" not in tail:
            fqn, tag = head, tail
        tag = tag or "latest"
    try:
        return image_class(name="default", fqn=fqn, tag=tag, digest=digest or None)
    except Exception as e:  # flytekit raises ValueError, AssertionError, ...: one line, no traceback
        raise RenderError(f"--image {image!r}: flytekit cannot serialize with it: {type(e).__name__}: {e}") from None


def _frontend_of(entity: Any) -> Any:
    """The installed front-end that owns `entity` (`FRONTENDS`), or None (a flytekit task, or no task). Only the
    front-ends whose SDK is already loaded are asked: a module defining such a task has imported its SDK."""
    from importlib.metadata import entry_points

    for point in entry_points(group=FRONTENDS):
        if point.name in sys.modules:
            frontend = point.load()
            if frontend.owns(entity):
                return frontend
    return None


def _serialize_by(frontend: Any, entity: Any) -> dict[str, Any]:
    """A task's template from its front-end, its module named from the root `load_task` used."""
    func = getattr(entity, "func", None)
    module = sys.modules.get(getattr(func, "__module__", "") or "")
    file = getattr(module, "__file__", None)
    root = _import_root(Path(file).resolve(), module.__name__) if module is not None and file else None
    with user_output_to_stderr():
        try:
            return template_to_dict(frontend.task_template(entity, root_dir=root))
        except (RenderError, TemplateError, ConfigError, ModuleNotFoundError):
            raise
        except Exception as e:  # the SDK and the user's code raise anything here: one line, no traceback
            name = getattr(entity, "name", "the task")
            raise RenderError(f"{name}: cannot be serialized: {type(e).__name__}: {e}") from None


def load_task(path: str, task_name: str) -> Any:
    """Import a Python file by path and return its task `task_name`.

    Args:
        path: the `.py` file.
        task_name: the attribute name of the decorated task in that file.

    Returns:
        The flytekit task, or the Flyte 2 task (``@env.task`` of a ``flyte.TaskEnvironment``).

    Raises:
        RenderError: the file does not exist or has no such task.
        ModuleNotFoundError: the file imports a module only an extra installs (``flyte``: the ``flyte2`` extra);
            `main` names the extra.
    """
    from flytekit.core.base_task import PythonTask

    file = Path(path).resolve()
    if not file.is_file():
        raise RenderError(f"{path}: no such file")
    module_name = _module_name(file)
    root = _import_root(file, module_name)
    sys.path.insert(0, str(root))
    try:
        spec = importlib.util.spec_from_file_location(module_name, file)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        with user_output_to_stderr():  # a module-level print() must not end up in the YAML
            spec.loader.exec_module(module)
    except SyntaxError as e:
        where = f"{e.filename or path}:{e.lineno}" if e.lineno else str(e.filename or path)
        raise RenderError(f"{where}: syntax error: {e.msg}") from None
    except ModuleNotFoundError as e:
        if _extra_for(e.name) is not None:
            raise  # main() names the extra to install
        raise RenderError(f"{_user_frame(e, file)}: {type(e).__name__} while importing it: {e}") from None
    except Exception as e:  # the user's module raised while it was imported: one line naming the file and line
        raise RenderError(f"{_user_frame(e, file)}: {type(e).__name__} while importing it: {e}") from None
    finally:
        sys.path.remove(str(root))

    def is_task(value: Any) -> bool:
        return isinstance(value, PythonTask) or _frontend_of(value) is not None

    entity = getattr(module, task_name, None)
    if not is_task(entity):
        tasks = sorted(k for k, v in vars(module).items() if is_task(v))
        raise RenderError(f"{path}: no task named {task_name!r}; tasks in this file: {tasks}")
    return entity


def _user_frame(error: BaseException, file: Path) -> str:
    """`<file>:<line>` of the deepest frame of `error`'s traceback in the user's `file` (the file alone if none)."""
    import traceback

    line = None
    for frame in traceback.extract_tb(error.__traceback__):
        if frame.filename and Path(frame.filename).resolve() == file:
            line = frame.lineno
    return f"{file}:{line}" if line else str(file)


def _import_root(file: Path, module_name: str) -> Path:
    """The directory `module_name` (of `file`) is imported from: one level up per package above the module."""
    root = file.parent
    for _ in module_name.split(".")[1:]:
        root = root.parent
    return root


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
            if template is not None and template.get("type") == TASK_TYPE:
                found[template["id"]["name"]] = template
    if task_name:
        found = {k: v for k, v in found.items() if k == task_name or k.endswith(f".{task_name}")}
    if len(found) != 1:
        what = "no pytorch task" if not found else f"several pytorch tasks {sorted(found)}; name one"
        raise RenderError(f"{path}: {what}" + (f" matching {task_name!r}" if task_name and not found else ""))
    return next(iter(found.values()))


def parse_inputs(pairs: list[str]) -> dict[str, str]:
    """`--input name=value` pairs as a dict.

    Args:
        pairs: the raw arguments.

    Returns:
        name -> value text.

    Raises:
        RenderError: a pair without `=`, or a name given twice.
    """
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise RenderError(f"--input {pair!r}: expected NAME=VALUE, e.g. --input epochs=3")
        if name in out:
            raise RenderError(f"--input {name}: given twice")
        out[name] = value
    return out


def input_literals(template: dict[str, Any], given: dict[str, str], defaults: Optional[dict[str, Any]] = None) -> Any:
    """Convert `--input` values to the task's input `LiteralMap` with flytekit's type engine.

    A value is read as its input's type: text for `str`, a number for `int` / `float`, `true` / `false` for `bool`,
    a path or URL for files and directories, and JSON for anything else (lists, dicts, dataclasses).

    Args:
        template: the TaskTemplate dict (its `interface` gives the types).
        given: name -> value text.
        defaults: the task's Python defaults (when rendered from FILE.py), used for inputs not given.

    Returns:
        A flytekit `LiteralMap`.

    Raises:
        RenderError: an unknown name, a missing input, or a value that does not convert.
    """
    from flyteidl.core import interface_pb2
    from flytekit.core.context_manager import FlyteContextManager
    from flytekit.core.type_engine import TypeEngine
    from flytekit.models.interface import TypedInterface
    from flytekit.models.literals import LiteralMap
    from google.protobuf import json_format

    interface = TypedInterface.from_flyte_idl(
        json_format.ParseDict(template.get("interface") or {}, interface_pb2.TypedInterface())
    )
    variables = interface.inputs
    defaults = defaults or {}
    unknown = sorted(set(given) - set(variables))
    if unknown:
        raise RenderError(f"--input {unknown[0]}: the task has no such input; its inputs: {sorted(variables)}")
    missing = sorted(set(variables) - set(given) - set(defaults))
    if missing:
        raise RenderError(f"missing --input for {missing} (no default); the task's inputs: {sorted(variables)}")
    ctx = FlyteContextManager.current_context()
    literals = {}
    for name, variable in variables.items():
        python_type = TypeEngine.guess_python_type(variable.type)
        if name in given:
            try:
                value = _python_value(given[name], python_type)
            except (ValueError, TypeError) as e:
                raise RenderError(f"--input {name}={given[name]!r}: not a {_type_name(python_type)} value ({e})") from e
        else:
            value = defaults[name]
        try:
            literals[name] = TypeEngine.to_literal(ctx, value, python_type, variable.type)
        except Exception as e:  # flytekit raises TypeTransformerFailedError, AssertionError, ValueError, ...
            raise RenderError(f"--input {name}: {type(e).__name__}: {e}") from e
    return LiteralMap(literals)


def frontend_inputs(frontend: Any, entity: Any, given: dict[str, str]) -> Any:
    """Another SDK's task's `--input` values as the inputs message its pods read, from its front-end.

    Args:
        frontend: the task's front-end (`FRONTENDS`).
        entity: the task.
        given: name -> value text.

    Returns:
        The message (Flyte 2's ``Inputs``).

    Raises:
        RenderError: an unknown name, a missing input, or a value that does not convert.
    """
    try:
        return frontend.inputs_message(entity, given)
    except KeyError as e:
        raise RenderError(e.args[0]) from None
    except ValueError as e:
        raise RenderError(str(e)) from None


def _type_name(python_type: Any) -> str:
    return getattr(python_type, "__name__", None) or str(python_type)


def _python_value(text: str, python_type: Any) -> Any:
    if python_type is str:
        return text
    if python_type is bool:
        if text.lower() not in ("true", "false"):
            raise ValueError("use true or false")
        return text.lower() == "true"
    if python_type in (int, float):
        return python_type(text)
    name = _type_name(python_type)
    if name in ("FlyteFile", "FlyteDirectory") or "FlyteFile" in name or "FlyteDirectory" in name:
        return python_type(text)
    return json.loads(text)


def write_inputs(literals: Any, prefix: str) -> str:
    """Write `inputs.pb` under `prefix`: a local folder, or a URL written with flytekit's data persistence.

    Args:
        literals: the `LiteralMap` (a flytekit model), or a protobuf message written as it is (a Flyte 2 task's
            ``flyteidl2.task.Inputs``, what its pods' entrypoint reads).
        prefix: local folder or remote prefix (`s3://...`, `gs://...`).

    Returns:
        The path or URL of the written `inputs.pb`.

    Raises:
        RenderError: the file cannot be written.
    """
    message = literals.to_flyte_idl() if hasattr(literals, "to_flyte_idl") else literals
    data = message.SerializeToString()
    if "://" not in prefix:
        folder = Path(prefix).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "inputs.pb").write_bytes(data)
        return str(folder / "inputs.pb")
    import tempfile

    from flytekit.core.context_manager import FlyteContextManager

    url = prefix.rstrip("/") + "/inputs.pb"
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "inputs.pb"
        local.write_bytes(data)
        try:
            FlyteContextManager.current_context().file_access.put_data(str(local), url)
        except Exception as e:  # fsspec / cloud SDK errors have no common base
            raise RenderError(f"--inputs-to {prefix}: could not write {url}: {type(e).__name__}: {e}") from e
    return url


def default_image_warnings(job: dict[str, Any], target: JobTarget) -> list[str]:
    """Warnings for primary containers whose image is flytekit's or Flyte 2's default image (no torch, no plugin).

    Args:
        job: the job `target` wrote.
        target: its kind.

    Returns:
        One line per primary container (per role, or for the nodes) with that image.
    """
    out = []
    for role, _, image in target.primary_images(job):
        if image.startswith(FLYTEKIT_DEFAULT_IMAGE):
            whose, lacks = "flytekit's", "flytekitplugins-pytorch"
        elif image.startswith(FLYTE2_DEFAULT_IMAGE):
            whose, lacks = "Flyte 2's", "flyte2_pytorch"
        else:
            continue
        out.append(
            f"warning: {role} image {image} is {whose} default image, which has neither torch nor {lacks}: "
            "the pods will fail at import; pass --image with your training image"
        )
    return out


_PATH_FLAGS = {
    "input_path": "--input NAME=VALUE with --inputs-to s3://<bucket>/<run> (or --inputs with the URL of an inputs.pb)",
    "output_prefix": "--output-prefix s3://<bucket>/<run>",
    "raw_output_prefix": "--raw-output-prefix (default: under --output-prefix)",
    "checkpoint_prefix": "--checkpoint-prefix (default: under --output-prefix)",
}
"""The execution metadata's Flyte paths -> the render flags that set them."""


def placeholder_warnings(meta: ExecutionMetadata) -> list[str]:
    """One warning when the job reads or writes under the placeholder bucket `DEFAULT_BUCKET`.

    Nothing writes `inputs.pb` there, so such a job fails in `pyflyte-execute` before the task's code runs. The
    paths are read from the execution metadata the job was written from, the same for every job kind.

    Args:
        meta: the execution metadata `render` wrote the job with.

    Returns:
        No line, or one line naming the placeholder paths and the flags that replace them.
    """
    found = {
        field: str(getattr(meta, field))
        for field in _PATH_FLAGS
        if str(getattr(meta, field) or "").startswith(DEFAULT_BUCKET)
    }
    if not found:
        return []
    parts = []
    if "input_path" in found:
        parts.append(
            f"reads its inputs from the placeholder {found['input_path']}, which nothing writes (it fails "
            "before your code runs)"
        )
    writes = [f for f in found if f != "input_path"]
    if writes:
        parts.append(f"writes its outputs under the placeholder {DEFAULT_BUCKET}/")
    fixes = [_PATH_FLAGS[f] for f in found if f in ("input_path", "output_prefix")] or [_PATH_FLAGS[writes[0]]]
    return [f"warning: the job {' and '.join(parts)}; pass {' and '.join(fixes)}"]


def check_job_options(args: argparse.Namespace, config: BackendConfig) -> BackendConfig:
    """Check `--name`, `--image` and `--namespace` with the rules the backend and the SDK apply to the same fields.

    `--name` is a DNS-1035 label of at most 63 characters, what the job kinds' webhooks and CRDs accept (the names
    the kind's controllers derive from it, `<name>-worker-<i>`, are checked once the job is built:
    `generated_name_problem`); `--image` is an image reference the kubelet accepts (the SDK's `container_image`
    check; no tag is `:latest`); `--namespace` is checked by `BackendConfig`, as the config's own `namespace` is.

    Args:
        args: parsed arguments.
        config: backend config.

    Returns:
        `config`, with `--namespace` as its namespace when given.

    Raises:
        RenderError: a value no cluster would accept; the message names the flag and the value.
    """
    name = args.name
    if name is not None and not DNS1035_LABEL.match(name):
        raise RenderError(
            f"--name {name!r} ({len(name)} characters) is not a job name Kubernetes accepts: use at most 63 "
            "lower-case letters, digits and "
            "'-', starting with a letter and ending with a letter or digit, e.g. 'mnist-1'"
        )
    if args.image is not None:
        problem = image_reference_problem(args.image)
        if problem is not None:
            raise RenderError(
                f"--image {args.image!r} is not an image reference the kubelet accepts ({problem}); "
                "use e.g. 'ghcr.io/org/train:1.0'"
            )
    if args.namespace is not None:
        try:
            return dataclasses.replace(config, job=dataclasses.replace(config.job, namespace=args.namespace))
        except ConfigError as e:
            raise RenderError(f"--namespace {args.namespace!r}: {e}") from e
    return config


def generated_name_problem(job: dict[str, Any], name: str) -> Optional[str]:
    """Whether the names the job's kind derives from `name` (its pods, Services, Jobs: `Declaration.generated_names`)
    fit the 63 characters of a DNS-1035 label, for `--name`: the limit depends on the kind and on the replica count
    (`<name>-worker-<i>` of a PyTorchJob, `<name>-node-0-<i>-xxxxx` of a TrainJob's pods).

    Args:
        job: the built job (its kind and replica counts; its own name may have been shortened by the writer).
        name: the `--name` given.

    Returns:
        A message naming the longest generated name and the longest `--name` that fits, or None.
    """
    renamed = {**job, "metadata": {**(job.get("metadata") or {}), "name": name}}
    for generated, what in declaration_for(job).generated_names(renamed):
        if len(generated) > 63:
            room = 63 - (len(generated) - len(name))
            return (
                f"--name {name!r} ({len(name)} characters): this {job.get('kind')}'s {what} would be named "
                f"{generated!r}, {len(generated)} characters, over the 63 Kubernetes allows; use at most {room} "
                "characters"
            )
    return None


_UNFILLED = re.compile(r"\{\{\s*[.$]?\s*(\w+)\s*\}\}")
_FILLED_AT = {
    "remote_package_path": "the uploaded code archive of a fast-registered package (`pyflyte package --fast`), "
    "filled when `pyflyte register` uploads it: render the task from its .py file, or package it without --fast",
    "dest_dir": "the folder a fast-registered package is unpacked to, filled at registration (`pyflyte register`)",
}
_FLYTE2_RUN = ("runname", "actionname", "runstarttime")
"""Flyte 2's placeholders for the run an action belongs to, in every Flyte 2 task's arguments: Flyte 2 fills them when
it runs the task, and its entrypoint reads one left unfilled as the `RUN_NAME` or `ACTION_NAME` variable and the
epoch (`flyte/_bin/runtime.py`, `_run_action`), so they are said, not warned about."""


def unfilled_placeholder_warnings(job: Any) -> list[str]:
    """The Flyte placeholders (`{{ .name }}`) still in the job after rendering: one line for Flyte 2's run
    placeholders (who fills them), one warning naming every other one and what fills it.

    Args:
        job: the rendered job.

    Returns:
        Lines for stderr; empty when every placeholder was filled.
    """
    found: dict[str, None] = {}

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        elif isinstance(value, str) and "{{" in value:
            for m in _UNFILLED.finditer(value):
                found.setdefault(m.group(0), None)

    walk(job)
    run = [text for text in found if _placeholder_name(text) in _FLYTE2_RUN]
    other = [text for text in found if text not in run]
    out = []
    if run:
        out.append(
            f"note: the job holds Flyte 2's {_listed(run)}, which name the run: Flyte 2 fills them when it runs the "
            "task"
        )
    if other:
        described = ", ".join(f"{text} ({_FILLED_AT.get(_placeholder_name(text), _UNKNOWN)})" for text in other)
        noun = "placeholder" if len(other) == 1 else "placeholders"
        out.append(f"warning: the job still holds the {noun} {described}; the job as printed cannot run")
    return out


_UNKNOWN = "a value Flyte fills when it runs the task, which render cannot know"


def _placeholder_name(text: str) -> str:
    m = _UNFILLED.match(text)
    return (m.group(1) if m else text).lower()


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _not_a_pytorch_task(template: dict[str, Any]) -> Optional[str]:
    kind = template.get("type")
    if kind in (None, TASK_TYPE, CONNECTOR_TASK_TYPE):
        return None
    name = (template.get("id") or {}).get("name") or "this task"
    return (
        f"{name} is a {kind!r} task, not a pytorch task: render prints the "
        f"{' or '.join(t.kind for t in BY_CONFIG.values())} a pytorch task "
        "(@pytorch_task, or @task(task_config=PyTorch(...)) / Elastic(...); under Flyte 2, @env.task of a "
        "flyte.TaskEnvironment(plugin_config=PyTorch(...)) / Elastic(...) / Connector(...)) becomes on a cluster; "
        "other tasks run as Flyte's own pods and have no job to render"
    )


NATIVE_PLUGIN_IGNORES = {
    keys.QUEUE: "queue",
    keys.PRIORITY_CLASS: "priority class",
    keys.GANG_SCHEDULING: "gang scheduling",
    keys.MIN_AVAILABLE: "min_available",
    keys.SUSPEND: "suspend",
    keys.SHM_SIZE: "/dev/shm size (shm_size)",
    keys.ACCELERATOR: "accelerator",
    keys.GPU_RESOURCE: "gpu_resource",
    keys.MASTER_RESTART_POLICY: "the Master's restart policy ExitCode",
    keys.WORKER_RESTART_POLICY: "the Worker's restart policy ExitCode",
    keys.MASTER_POD_TEMPLATE: "the Master's pod template",
    keys.WORKER_POD_TEMPLATE: "the Worker's pod template",
}
"""The `pytorch.*` keys Flyte 2's native kfoperators plugin never reads (it builds its job from the
`DistributedPyTorchTrainingTask` message alone; docs/flyte2.md lists them), with the user's name for each."""


def native_plugin_warnings(template: dict[str, Any], flyte2: bool = False) -> list[str]:
    """One warning for a Flyte 2 task of type `pytorch`, which Flyte 2 runs with its native kfoperators plugin, naming
    the settings of this job that plugin ignores (`NATIVE_PLUGIN_IGNORES`): render shows the job this project's
    connector would create, which applies them. Flyte 2 keeps a task's `pytorch.*` keys in its container's config
    (flytekit, in the template's own `config`), which tells a Flyte 2 template apart; a task of a pod template has no
    container, and its front-end puts them in the template's `config` (`flyte2`: the task came from it).

    Args:
        template: the TaskTemplate dict.
        flyte2: whether the template is a Flyte 2 task's, as its front-end serialized it.

    Returns:
        No line, or one naming the ignored settings and what to use instead.
    """
    if template.get("type") != TASK_TYPE:
        return []
    entries = (template.get("container") or {}).get("config") or []
    given = {str(e.get("key")) for e in entries if isinstance(e, dict)}
    if flyte2:
        given |= {str(k) for k in template.get("config") or {}}
    ignored = [label for key, label in NATIVE_PLUGIN_IGNORES.items() if key in given]
    if not ignored:
        return []
    name = str((template.get("id") or {}).get("name") or "this task").rsplit(".", 1)[-1]
    return [
        f"warning: {name} is a Flyte 2 task of type {TASK_TYPE!r}, which Flyte 2 runs with its native kfoperators "
        f"plugin: it reads only the DistributedPyTorchTrainingTask message, so {', '.join(ignored)} of this job "
        "are ignored on that path; to have them applied, wrap the config in flyte2_pytorch.Connector(...) (task type "
        f"{CONNECTOR_TASK_TYPE!r}, served by this project's connector)"
    ]


def client_side_apply_note(job: dict[str, Any]) -> Optional[Problem]:
    """A note when plain `kubectl apply` would fail on the job: client-side apply copies the whole object into its
    `kubectl.kubernetes.io/last-applied-configuration` annotation, and a job's annotations may hold at most
    `ANNOTATIONS_TOTAL_MAX_BYTES` (256 KiB, `ValidateAnnotationsSize`) in total. The API server stores such a job:
    `kubectl create -f` and `kubectl apply --server-side` keep no copy.

    Args:
        job: the rendered job.

    Returns:
        The note, or None when the copy fits.
    """
    annotation = "kubectl.kubernetes.io/last-applied-configuration"
    own = (job.get("metadata") or {}).get("annotations") or {}
    total = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in own.items())
    total += len(annotation) + job_size(job)
    if total <= ANNOTATIONS_TOTAL_MAX_BYTES:
        return None
    message = (
        f"kubectl apply: the {job.get('kind')} is {job_size(job):,} bytes; plain `kubectl apply` (client-side) copies "
        f"it into the {annotation} annotation, over the {ANNOTATIONS_TOTAL_MAX_BYTES:,} bytes (256 KiB) a job's "
        "annotations may hold, and fails; `kubectl create -f` and `kubectl apply --server-side` work"
    )
    return Problem(NOTE, "", "kubectl apply", message)


def render_job(template: dict[str, Any], args: argparse.Namespace, config: BackendConfig) -> BuiltJob:
    """Build the job for `template` with the command-line's metadata (`build.build_job`; warnings on stderr).

    `metadata.namespace` is written only when `--namespace` is given (a job without one is created in the namespace
    `kubectl -n` names, or the context's).

    Args:
        template: the TaskTemplate dict.
        args: parsed arguments (namespace, name, image, paths).
        config: backend config.

    Returns:
        The built job, its kind and the admission model's findings.

    Raises:
        TemplateError: the template is not a valid pytorch task.
        RenderError: it is not a pytorch task at all.
        ConfigError: the target is `auto`, which render cannot resolve.
    """
    problem = _not_a_pytorch_task(template)
    if problem:
        raise RenderError(problem)
    meta = render_metadata(template, args, config)
    target = _render_target(args, config)
    built = build_job(template, meta, config, target, installed_crd(args, target))
    if args.name:
        problem = generated_name_problem(built.job, args.name)
        if problem:
            raise RenderError(problem)
    fitted = built.fitted.notes if built.fitted is not None else ()
    for warning in built.warnings:
        if warning not in fitted:
            print(f"{PROGRAM} render: warning: {warning}", file=sys.stderr)
    if fitted:  # what fitting the job to --crd wrote otherwise or dropped: a note (a `--check` line too)
        built = dataclasses.replace(built, problems=(*built.problems, *(Problem(NOTE, "", "--crd", n) for n in fitted)))
    job = built.job
    lines = default_image_warnings(job, built.target) + placeholder_warnings(meta) + unfilled_placeholder_warnings(job)
    for line in lines:
        print(f"{PROGRAM} render: {line}", file=sys.stderr)
    note = client_side_apply_note(job)
    if note is not None:
        built = dataclasses.replace(built, problems=(*built.problems, note))
    return built


def installed_crd(args: argparse.Namespace, target: JobTarget) -> Optional[InstalledCrd]:
    """The cluster's installed CRD `--crd` names, which must be the CRD of the kind render writes.

    Args:
        args: parsed arguments.
        target: the kind render writes.

    Returns:
        The CRD, or None without `--crd`.

    Raises:
        RenderError: the file holds no CRD, or the CRD of another kind (the message names it and the `--target`).
        OSError: the file cannot be read.
    """
    path = getattr(args, "crd", None)
    if not path:
        return None
    try:
        crd = read_crd_file(path)
    except ValueError as e:
        raise RenderError(str(e)) from None
    if crd.declaration is not target.declaration:
        raise RenderError(
            f"--crd {path} defines {crd.declaration.crd_name}, the CRD of the {crd.kind}, but render writes a "
            f"{target.kind}: pass --target {crd.declaration.config_name}, or the {target.declaration.crd_name} CRD"
        )
    return crd


def render_metadata(template: dict[str, Any], args: argparse.Namespace, config: BackendConfig) -> ExecutionMetadata:
    """The execution a rendered job is written for: a sample identity that only names it, the paths and image the
    command line gives, and no namespace unless `--namespace` is given.

    Args:
        template: the TaskTemplate dict (its task name names the job).
        args: parsed arguments.
        config: backend config (the job name prefix).

    Returns:
        The execution metadata.
    """
    task = str((template.get("id") or {}).get("name") or "").rsplit(".", 1)[-1] or "task"
    identity = ExecutionIdentity("render", "local", task, "n0", 0)
    name = args.name or job_name(
        identity.project, identity.domain, identity.execution_name, identity.node_id, prefix=config.job.job_name_prefix
    )
    meta = execution_metadata(identity, args.output_prefix or f"{DEFAULT_BUCKET}/{name}", config)
    overrides = {
        "input_path": args.inputs,
        "raw_output_prefix": args.raw_output_prefix,
        "checkpoint_prefix": args.checkpoint_prefix,
        "prev_checkpoint_prefix": args.prev_checkpoint,
    }
    # A rendered job belongs to no Flyte execution: the sample identity only names it, and sets no
    # FLYTE_INTERNAL_EXECUTION_* variables.
    return dataclasses.replace(
        meta,
        project="",
        domain="",
        execution_name="",
        node_id="",
        namespace=args.namespace or None,
        job_name=name,
        image_override=args.image,
        **{k: v for k, v in overrides.items() if v},
    )


def _render_target(args: argparse.Namespace, config: BackendConfig) -> JobTarget:
    choice = getattr(args, "target", None) or config.target
    target = target_for_config(choice)
    if target is None:
        raise ConfigError(
            f"target={choice!r}: render needs no cluster and cannot ask one; pass --target, one of {list(BY_CONFIG)}"
        )
    return target


def render(template: dict[str, Any], args: argparse.Namespace, config: BackendConfig) -> str:
    """Build the job for `template`, put it through the admission model, and return it as YAML.

    Args:
        template: the TaskTemplate dict.
        args: parsed arguments (namespace, name, image, paths).
        config: backend config.

    Returns:
        One YAML document.

    Raises:
        TemplateError: the template is not a valid pytorch task, or the cluster would not admit the job
            (`JobNotAdmitted`, naming each setting).
    """
    built = render_job(template, args, config)
    job = built.admitted()
    for note in built.notes:
        if note.setting != CEL_UNAVAILABLE:  # a base install renders without the backend extra: --check says it
            print(f"{PROGRAM} render: note: {note.message}", file=sys.stderr)
    return yaml.safe_dump(job, sort_keys=False, width=120)


def check_report(job: dict[str, Any], problems: list[Problem]) -> str:
    """The `--check` report: one line per problem (`<verdict> <path>: <message>`, or `<verdict> <message>` when the
    message starts with the path, so that the path is said once), then the verdict.

    Args:
        job: the rendered job.
        problems: `admit(job)`.

    Returns:
        The report text.
    """
    kind, name = job.get("kind"), (job.get("metadata") or {}).get("name")
    lines = [f"{p.verdict} {p.message}" if p.path and p.message.startswith(p.path) else
             f"{p.verdict} {p.path or '-'}: {p.message}" for p in problems]  # fmt: skip
    refusing = [p for p in problems if p.refuses]
    if refusing:
        lines.append(f"{kind} {name}: refused ({len(refusing)} problem(s)); nothing would be sent")
    else:
        notes = f", {len(problems)} note(s)" if problems else ""
        lines.append(f"{kind} {name}: admitted intact ({job_size(job):,} bytes{notes})")
    return "\n".join(lines) + "\n"


REFUSED = "refused"
"""`--check`'s verdict for a setting the backend refuses before it writes a job (what the kind cannot express, a
webhook rule its writer checks, a template the reader cannot run)."""


def refused_report(kind: str, name: str, error: TemplateError) -> str:
    """The `--check` report of a task the backend refuses before a job is written: one line, then the verdict.

    Args:
        kind: the job kind render was asked for.
        name: the job's name.
        error: what the reader, the plan or the writer refused.

    Returns:
        The report text.
    """
    return f"{REFUSED} -: {error}\n{kind} {name}: refused (1 problem(s)); nothing would be sent\n"


def _parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """(the program's parser, `render`'s)."""
    parser = argparse.ArgumentParser(prog=PROGRAM, description="Tools for the Kubeflow job backend of Flyte.")
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser(
        "render",
        help="print the job YAML of a pytorch task (the kind --target or the config selects)",
        description="Print the job a pytorch task becomes, of the kind --target (or the config's target) selects: "
        "the connector's exact object, checked against what the cluster admits. Either FILE.py TASK, or "
        "--template FILE [TASK].",
        epilog=f"example: {PROGRAM} render train.py train_mnist --image ghcr.io/org/train:1.0 > job.yaml",
    )
    r.add_argument("source", nargs="?", help="Python file with the task (omit with --template)")
    r.add_argument("task", nargs="?", help="task name (attribute in the file, or in a pyflyte package archive)")
    r.add_argument("--template", help="serialized task: TaskTemplate/TaskSpec .pb, JSON, or pyflyte package .tgz")
    r.add_argument(
        "--check",
        action="store_true",
        help="print what the cluster would reject, silently drop or never start, and why, instead of the job "
        "(exit 0: admitted intact, 1: refused)",
    )
    r.add_argument(
        "--crd",
        metavar="FILE",
        help="the cluster's installed CRD of the job's kind (kubectl get crd <plural>.<group> -o yaml): the job is "
        "written for it and checked against it, as the connector does with the CRD it reads",
    )
    r.add_argument("--namespace", help="metadata.namespace (default: none, so that kubectl -n NS decides)")
    r.add_argument("--name", help="metadata.name (default: derived from the task name)")
    r.add_argument("--image", help="image for replicas without their own (and for serializing FILE.py)")
    r.add_argument("--config", help=f"backend config YAML (default: {ENV_PREFIX}CONFIG / {ENV_PREFIX}* env)")
    r.add_argument(
        "--target",
        choices=tuple(BY_CONFIG),
        help="job kind: "
        + "; ".join(f"{name}: {t.kind} ({t.description})" for name, t in BY_CONFIG.items())
        + " (default: the config's target)",
    )
    r.add_argument(
        "--inputs",
        metavar="URL",
        help="where the job reads the task's inputs (an inputs.pb file; default: OUTPUT_PREFIX/inputs.pb)",
    )
    r.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a task input (repeatable): written to an inputs.pb under --inputs-to, which the job then reads",
    )
    r.add_argument(
        "--inputs-to",
        metavar="PREFIX",
        help="where --input writes inputs.pb: a local folder or a URL such as s3://bucket/run-1 "
        "(default: --output-prefix)",
    )
    r.add_argument(
        "--output-prefix",
        metavar="URL",
        help=f"where the task writes its outputs: a URL or a path every pod mounts (default: {DEFAULT_BUCKET}/NAME)",
    )
    r.add_argument(
        "--raw-output-prefix",
        metavar="URL",
        help="where the task writes files and data frames (default: OUTPUT_PREFIX/raw_output)",
    )
    r.add_argument(
        "--checkpoint-prefix",
        metavar="URL",
        help="where the task writes checkpoints (default: OUTPUT_PREFIX/checkpoint_output)",
    )
    r.add_argument(
        "--prev-checkpoint", metavar="URL", help="a previous run's checkpoints to resume from (default: none)"
    )
    return parser, r


def main(argv: Optional[list[str]] = None) -> int:
    """Console entry point `pytorchjob`.

    Args:
        argv: arguments without the program name; `sys.argv[1:]` when None.

    Returns:
        0 on success (with `--check`: the job would be admitted intact), 1 with `--check` when it would not, 2 for
        bad input (a job the cluster would not admit included), 3 when an optional dependency is missing (one line
        on stderr naming the extra to install, no traceback).

    Raises:
        SystemExit: from argparse, for `--help` and for arguments it cannot parse (exit code 2). Every other error
            of bad input is caught here and becomes the one-line message and return code 2.
    """
    parser, render_parser = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # argparse would show the program's usage: a misspelled flag of `render` gets `render`'s
        render_parser.error(f"unrecognized arguments: {' '.join(unknown)}{_nearest_flags(render_parser, unknown)}")
    try:
        return _render_command(render_parser, args)
    except (RenderError, TemplateError, ConfigError, OSError) as e:
        print(f"{PROGRAM} render: {e}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:
        extra = _extra_for(e.name)
        if extra is None:
            raise
        module = (e.name or "").partition(".")[0]
        print(f"{PROGRAM} render: needs {module!r}: {install_hint(extra)}", file=sys.stderr)
        return 3


def _nearest_flags(parser: argparse.ArgumentParser, extra: list[str]) -> str:
    """ "; did you mean '--check'?" for the first unknown flag with a near one, else ""."""
    flags = [f for action in parser._actions for f in action.option_strings if f.startswith("--")]
    for arg in extra:
        name = arg.split("=", 1)[0]
        if name.startswith("--") and closest(name, flags):
            return f"; {did_you_mean(name, flags)}"
    return ""


def check_file(args: argparse.Namespace, option: str, config: Optional[BackendConfig] = None) -> None:
    """`--crd` or `--config` names a file that exists, checked before the file is read and before the task's module
    is imported.

    Args:
        args: parsed arguments.
        option: `crd` or `config`.
        config: the backend config (its `target` names the CRD to save when `--target` is not given).

    Raises:
        RenderError: the file is missing or is not a file; the message names the option, the path and what to pass.
    """
    path = getattr(args, option, None)
    if not path or os.path.isfile(path):
        return
    if option == "config":
        fix = (
            "pass a backend config YAML file (docs/reference/backend-config.md), or leave --config out to use "
            f"{ENV_PREFIX}CONFIG and the {ENV_PREFIX}* variables"
        )
    else:
        target = BY_CONFIG.get(getattr(args, "target", None) or (config.target if config is not None else ""))
        names = [target.declaration.crd_name] if target is not None else [t.declaration.crd_name for t in KINDS]
        fix = f"save the cluster's CRD with `kubectl get crd {' or '.join(names)} -o yaml > FILE` and pass that FILE"
    problem = "no such file" if not os.path.exists(path) else "not a file"
    raise RenderError(f"--{option} {path}: {problem}; {fix}")


_PATH_OPTIONS = ("inputs", "output_prefix", "raw_output_prefix", "checkpoint_prefix", "prev_checkpoint")
"""The options that name where the job's pods read or write (a blob URL, or a path every pod mounts)."""

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
"""A URL's scheme (RFC 3986) and `://`: what fsspec's `split_protocol`, and so flytekit's data persistence, takes as a
protocol (`s3://`, `gs://`, `abfs://`, `file://`); any other string is a local path."""


def check_path_options(args: argparse.Namespace) -> None:
    """The path options name a URL or an absolute path: flytekit reads a string without a protocol as a local path,
    and a relative one is then relative to the pod's working directory, where nothing outside the pod reads it.

    Args:
        args: parsed arguments.

    Raises:
        RenderError: a value that is neither; the message names the option, the value and what is allowed.
    """
    for name in _PATH_OPTIONS:
        value = getattr(args, name, None)
        if not value or value == '""' and name == "prev_checkpoint":  # Flyte's own "no previous checkpoint"
            continue
        if not (_URL.match(value) or value.startswith("/")):
            option = "--" + name.replace("_", "-")
            raise RenderError(
                f"{option} {value!r} is neither a URL nor an absolute path: the pods would read it relative to their "
                "working directory; pass a URL of your blob store (s3://bucket/run-1, gs://..., abfs://...) or a "
                "path every pod mounts (/mnt/runs/run-1)"
            )


def _render_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """`render`: the template, the inputs it is given, then the job or its `--check` report on stdout."""
    check_file(args, "config")
    check_path_options(args)
    config = check_job_options(args, _load_config(args.config))
    check_file(args, "crd", config)
    given = parse_inputs(args.input)
    if given and not (args.inputs_to or args.output_prefix):
        raise RenderError("--input needs --inputs-to PREFIX (a local folder or a URL) or --output-prefix")
    template, entity = _template_of(parser, args)
    if given:
        args.inputs = args.inputs or _write_given_inputs(template, entity, given, args)
    flyte2 = entity is not None and _frontend_of(entity) is not None
    for line in native_plugin_warnings(template, flyte2):
        print(f"{PROGRAM} render: {line}", file=sys.stderr)
    if args.check:
        try:
            built = render_job(template, args, config)
        except TemplateError as e:  # refused before a job is written: still the report, exit 1
            target = _render_target(args, config)
            sys.stdout.write(refused_report(target.kind, render_metadata(template, args, config).job_name, e))
            return 1
        sys.stdout.write(check_report(built.job, list(built.problems)))
        return 1 if built.refusals else 0
    sys.stdout.write(render(template, args, config))
    return 0


def _template_of(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[dict[str, Any], Any]:
    """(the template, the task when it came from FILE.py else None)."""
    if args.template:
        if args.task is not None:
            parser.error("with --template give at most one positional argument (the task name)")
        return load_template_file(args.template, args.source), None
    if not args.source or not args.task:
        parser.error("give FILE.py TASK, or --template FILE")
    entity = load_task(args.source, args.task)
    return serialize_task(entity, args.image), entity


def _write_given_inputs(template: dict[str, Any], entity: Any, given: dict[str, str], args: argparse.Namespace) -> str:
    """Write `--input` values as the inputs the task's pods read; where they were written."""
    frontend = _frontend_of(entity) if entity is not None else None
    if frontend is not None:
        inputs = frontend_inputs(frontend, entity, given)
    else:
        defaults = dict(entity.python_interface.default_inputs_as_kwargs) if entity is not None else {}
        inputs = input_literals(template, given, defaults)
    written = write_inputs(inputs, args.inputs_to or args.output_prefix)
    if "://" not in written:
        print(
            f"{PROGRAM} render: wrote {written}; pods cannot read a local file: upload it and pass its URL "
            "with --inputs (or give --inputs-to s3://...)",
            file=sys.stderr,
        )
    return written


#: Top-level modules that only an extra installs, and that extra (the base package has none of them).
EXTRA_MODULES = {
    "kubernetes": "backend",
    "celpy": "backend",
    "grpc_health": "backend",
    "prometheus_client": "backend",
    "torch": "torch",
    "flyte": "flyte2",
    "flyteidl2": "flyte2",
    "flyte_migrate": "flyte2",
}


def _extra_for(module: Optional[str]) -> Optional[str]:
    """The extra that installs `module` (e.g. "kubernetes.client" -> "backend"), or None for any other module."""
    return EXTRA_MODULES.get((module or "").partition(".")[0])


def _load_config(path: Optional[str]) -> BackendConfig:
    """The backend config; any error in it is one line naming the file (`BackendConfig` raises a few non-ConfigError
    exceptions for values of the wrong shape, e.g. `log_links: 5`)."""
    source = path or f"{ENV_PREFIX}CONFIG / {ENV_PREFIX}* environment"
    try:
        return BackendConfig.from_yaml(Path(path)) if path else load_config()
    except (ConfigError, OSError):
        raise
    except (TypeError, ValueError, AttributeError, KeyError) as e:
        raise ConfigError(
            f"backend config {source}: a value has the wrong shape ({type(e).__name__}: {e}); "
            "see docs/reference/backend-config.md"
        ) from e


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

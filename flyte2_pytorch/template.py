"""A Flyte 2 task's template for the backend: what ``pytorchjob render`` and ``--template`` read.

The front-end serializes its own tasks, with flyte's serializer, and hands the backend Flyte 2's template as it is:
the protobuf JSON of ``flyteidl2.core.TaskTemplate``, which keeps flyteidl's field numbers and names. Flyte 2 writes a
task's ``config()`` (the ``pytorch.*`` keys) to the container (``Container.config``); reading them there is the
backend reader's own (its Flyte 2 dialect, ``backend_plugin.template``). A task with a pod template loses them in
Flyte 2's own serializer (its ``K8sPod`` has no container config), so `task_template` adds the task's own
``config()`` to the template's ``config``.

The backend never imports this module: ``pytorchjob render FILE.py TASK`` finds it through the entry point group
``flytekitplugins_pytorch.frontends`` (name: ``flyte``, the SDK whose tasks it serializes), and
``python -m flyte2_pytorch.template FILE.py TASK`` prints a template for ``pytorchjob render --template``::

    python -m flyte2_pytorch.template path/to/file.py TASK > task.json
    pytorchjob render --template task.json

It imports neither flytekit nor Flyte 1's flyteidl.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any, Optional

from pytorch_contract.template_keys import CONFIG_PREFIX

__all__ = ["owns", "task_template", "inputs_message", "main"]


def owns(entity: Any) -> bool:
    """Whether `entity` is a Flyte 2 task (the backend asks each front-end before it serializes a task).

    Args:
        entity: a module attribute of the user's file.

    Returns:
        True for a ``flyte.extend.TaskTemplate``; False without importing anything when ``flyte`` is not loaded.
    """
    if "flyte" not in sys.modules:  # a module defining a Flyte 2 task has imported flyte
        return False
    from flyte.extend import TaskTemplate

    return isinstance(entity, TaskTemplate)


def task_template(task: Any, *, root_dir: Optional[Path] = None, version: str = "v1") -> dict[str, Any]:
    """A Flyte 2 task's template, as the protobuf-JSON dict of ``flyteidl2.core.TaskTemplate``.

    Args:
        task: a Flyte 2 task (a `flyte2_pytorch.PyTorchTask` or `ElasticTask` for a pytorch task).
        root_dir: the directory the task's module is resolved from (default: its file's directory).
        version: the template's version.

    Returns:
        The template as Flyte 2 serializes it, the task's own ``pytorch.*`` keys added to its ``config``.
    """
    from flyte._internal.runtime.task_serde import get_proto_task
    from flyte.models import SerializationContext
    from google.protobuf import json_format

    if root_dir is None:
        root_dir = Path(task.source_file).resolve().parent if task.source_file else Path.cwd()
    sctx = SerializationContext(version=version, root_dir=root_dir)
    template = json_format.MessageToDict(get_proto_task(task, sctx))
    own = {k: v for k, v in (task.config(sctx) or {}).items() if k.startswith(CONFIG_PREFIX)}
    if own:
        template["config"] = {**template.get("config", {}), **own}
    return template


def inputs_message(task: Any, given: dict[str, str]) -> Any:
    """A Flyte 2 task's inputs as the ``flyteidl2.task.Inputs`` message its pod entrypoint (``a0 --inputs``) reads.

    Each value is text converted as ``flyte run`` converts its options (flyte's click types for the input's literal
    type: numbers, ``true``/``false``, JSON for lists, dicts and dataclasses, a path or URL for files); inputs left
    out take the function's defaults.

    Args:
        task: the Flyte 2 task.
        given: input name -> value text.

    Returns:
        ``flyteidl2.task.common_pb2.Inputs``.

    Raises:
        KeyError: a name the task has no input of (the message lists its inputs).
        ValueError: a missing input without a default, or a value that does not convert (the message names it).
    """
    import asyncio
    import warnings

    from flyte._internal.runtime.convert import convert_from_native_to_inputs
    from flyte.types import TypeEngine

    with warnings.catch_warnings():  # flyte's CLI imports rich_click, which uses names click deprecates
        warnings.simplefilter("ignore", DeprecationWarning)
        from flyte.cli._params import literal_type_to_click_type

    interface = task.native_interface
    inputs = dict(interface.inputs)
    unknown = sorted(set(given) - set(inputs))
    if unknown:
        raise KeyError(f"--input {unknown[0]}: the task has no such input; its inputs: {sorted(inputs)}")
    missing = sorted(set(interface.required_inputs()) - set(given))
    if missing:
        raise ValueError(f"missing --input for {missing} (no default); the task's inputs: {sorted(inputs)}")
    values = {}
    for name, text in given.items():
        python_type = inputs[name][0]
        try:
            click_type = literal_type_to_click_type(TypeEngine.to_literal_type(python_type), python_type)
            values[name] = click_type.convert(text, None, None)
        except Exception as e:  # click's BadParameter, flyte's TypeTransformerFailedError, json's errors, ...
            type_name = getattr(python_type, "__name__", str(python_type))
            raise ValueError(f"--input {name}={text!r}: not a {type_name} value ({e})") from e
    try:
        return asyncio.run(convert_from_native_to_inputs(interface, **values)).proto_inputs
    except Exception as e:  # flyte's type engine raises many types
        raise ValueError(f"--input: {type(e).__name__}: {e}") from e


def main(argv: Optional[list[str]] = None) -> int:
    """``python -m flyte2_pytorch.template FILE.py TASK``: print the task's template as JSON."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m flyte2_pytorch.template FILE.py TASK", file=sys.stderr)
        return 2
    path, name = Path(args[0]).resolve(), args[1]
    if not path.is_file():
        print(f"{args[0]}: no such file", file=sys.stderr)
        return 2
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        print(f"{path}: not a Python file", file=sys.stderr)
        return 2
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:  # one line naming the file and line, as `pytorchjob render` says it
        where = f"{e.filename or path}:{e.lineno}" if e.lineno else str(e.filename or path)
        print(f"{where}: syntax error: {e.msg}", file=sys.stderr)
        return 2
    except Exception as e:  # the user's module raised while it was imported: one line, no traceback
        print(f"{_user_line(e, path)}: {type(e).__name__} while importing it: {e}", file=sys.stderr)
        return 2
    task = getattr(module, name, None)
    if task is None or not hasattr(task, "plugin_config"):
        print(f"{path}: no Flyte 2 pytorch task named {name!r}", file=sys.stderr)
        return 2
    try:
        template = task_template(task, root_dir=path.parent)
    except Exception as e:  # flyte's serializer and the user's code raise anything here: one line
        print(f"{name}: cannot be serialized: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    print(json.dumps(template, indent=2, sort_keys=True))
    return 0


def _user_line(error: BaseException, file: Path) -> str:
    """`<file>:<line>` of the deepest frame of `error`'s traceback in `file` (the file alone if none)."""
    import traceback

    line = None
    for frame in traceback.extract_tb(error.__traceback__):
        if frame.filename and Path(frame.filename).resolve() == file:
            line = frame.lineno
    return f"{file}:{line}" if line else str(file)


if __name__ == "__main__":
    sys.exit(main())

"""A Flyte 2 task's template in the form the backend reads: ``pytorchjob render --template`` and the reader.

Flyte 2's ``TaskTemplate`` keeps flyteidl's field numbers, so its bytes parse as a flyteidl (Flyte 1) template. One
difference matters to the backend: Flyte 2 writes a task's ``config()`` (the ``pytorch.*`` keys) to the container
(``Container.config``), not to ``TaskTemplate.config``; `task_template` moves them to the template. A task with a
pod template loses them in Flyte 2's own serializer (its ``K8sPod`` has no container config), so `task_template`
takes them from the task itself.

Usage::

    python -m flyte2_pytorch.template path/to/file.py TASK > task.json
    pytorchjob render --template task.json

This module imports flyteidl (the backend's protos) when called, never when ``flyte2_pytorch`` is imported.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any, Optional

from pytorch_contract.template_keys import CONFIG_PREFIX

__all__ = ["task_template", "flyte1_template", "inputs_message", "main"]


def task_template(task: Any, *, root_dir: Optional[Path] = None, version: str = "v1") -> dict[str, Any]:
    """A Flyte 2 ``pytorch`` task as the protobuf-JSON dict of ``flyteidl.core.TaskTemplate``.

    Args:
        task: a `flyte2_pytorch.PyTorchTask` or `ElasticTask` (built by ``@env.task``).
        root_dir: the directory the task's module is resolved from (default: its file's directory).
        version: the template's version.

    Returns:
        The template, its ``config`` holding the ``pytorch.*`` keys.
    """
    from flyte._internal.runtime.task_serde import get_proto_task
    from flyte.models import SerializationContext

    if root_dir is None:
        root_dir = Path(task.source_file).resolve().parent if task.source_file else Path.cwd()
    sctx = SerializationContext(version=version, root_dir=root_dir)
    return flyte1_template(get_proto_task(task, sctx), task.config(sctx))


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


def flyte1_template(template: Any, config: Optional[dict[str, str]] = None) -> dict[str, Any]:
    """A Flyte 2 ``TaskTemplate`` (the message, or its bytes) as the protobuf-JSON dict of ``flyteidl.core``'s.

    The ``pytorch.*`` keys of its container's config move to the template's config; `config` adds (and wins over)
    keys the message lost (a pod template's container has no config in Flyte 2).

    Args:
        template: ``flyteidl2.core.tasks_pb2.TaskTemplate`` or its serialized bytes.
        config: the task's own ``config()``, when the task object is at hand.

    Returns:
        The template, its ``config`` holding the ``pytorch.*`` keys.
    """
    from flyteidl.core import tasks_pb2
    from google.protobuf import json_format

    data = template if isinstance(template, bytes) else template.SerializeToString()
    flyte1 = tasks_pb2.TaskTemplate.FromString(data)
    if flyte1.HasField("container"):
        for kv in flyte1.container.config:
            if kv.key.startswith(CONFIG_PREFIX):
                flyte1.config[kv.key] = kv.value
        kept = [kv for kv in flyte1.container.config if not kv.key.startswith(CONFIG_PREFIX)]
        del flyte1.container.config[:]
        flyte1.container.config.extend(kept)
    for key, value in (config or {}).items():
        if key.startswith(CONFIG_PREFIX):
            flyte1.config[key] = value
    return json_format.MessageToDict(flyte1)


def main(argv: Optional[list[str]] = None) -> int:
    """``python -m flyte2_pytorch.template FILE.py TASK``: print the task's template as JSON."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m flyte2_pytorch.template FILE.py TASK", file=sys.stderr)
        return 2
    path, name = Path(args[0]).resolve(), args[1]
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        print(f"{path}: not a Python file", file=sys.stderr)
        return 2
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    task = getattr(module, name, None)
    if task is None or not hasattr(task, "plugin_config"):
        print(f"{path}: no Flyte 2 pytorch task named {name!r}", file=sys.stderr)
        return 2
    print(json.dumps(task_template(task, root_dir=path.parent), indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A function pickled by value keeps its source file in the rank's tracebacks.

cloudpickle 3.1.3 and later write ``"<dynamic-code>"`` as the file of code pickled by value; the launcher carries the
files beside the function (``pytorch_core._codefiles``) and the rank puts them back. These tests make the dynamic
code themselves, so they check the restoring whatever cloudpickle release is installed; the end-to-end check is the
failing-rank tests (``tests/flyte2/test_local_run.py`` and the SDK's), run by CI's newest job with the newest
cloudpickle.
"""

from __future__ import annotations

import traceback
import types

import cloudpickle

from pytorch_core._codefiles import DYNAMIC_CODE, code_files, restore_code_files


def _helper(x: int) -> int:
    def inner() -> int:
        raise ValueError(f"boom {x}")

    return inner()


def _train(x: int) -> int:
    return _helper(x)


def _as_dynamic(code: types.CodeType) -> types.CodeType:
    """`code` as cloudpickle 3.1.3 rebuilds it from a by-value pickle: every file replaced."""
    consts = tuple(_as_dynamic(c) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=DYNAMIC_CODE, co_consts=consts)


def _unpickled_by_value() -> types.FunctionType:
    """`_train` and `_helper` as a rank gets them from a by-value pickle: fresh globals, dynamic code."""
    namespace: dict = {"__name__": __name__}
    for fn in (_train, _helper):
        namespace[fn.__name__] = types.FunctionType(_as_dynamic(fn.__code__), namespace, fn.__name__)
    return namespace["_train"]


def _traceback_of(fn: types.FunctionType) -> str:
    try:
        fn(3)
    except ValueError:
        return traceback.format_exc()
    raise AssertionError("the function did not raise")


def test_without_the_files_a_by_value_traceback_names_no_file():
    text = _traceback_of(_unpickled_by_value())
    assert text.count(DYNAMIC_CODE) == 3 and text.count(__file__) == 1, text  # only the caller's frame names it


def test_the_files_are_put_back_in_every_frame():
    files = code_files(_train)
    assert {key[1] for key in files} >= {"_train", "_helper", "_helper.<locals>.inner"}
    fn = _unpickled_by_value()
    restore_code_files(fn, files)
    text = _traceback_of(fn)
    assert DYNAMIC_CODE not in text, text
    assert text.count(__file__) == 4, text  # this test's call, _train, _helper, inner
    assert 'raise ValueError(f"boom {x}")' in text  # the source line, read from the file again


def test_code_pickled_by_reference_is_left_alone():
    fn = cloudpickle.loads(cloudpickle.dumps(_train))  # this module imports by name: pickled by reference
    assert fn is _train
    code = fn.__code__
    restore_code_files(fn, code_files(fn))
    assert fn.__code__ is code


def test_anything_but_a_function_is_ignored():
    assert code_files(print) == {} and code_files(None) == {}
    restore_code_files(print, {("m", "f", 1): "x.py"})  # no error

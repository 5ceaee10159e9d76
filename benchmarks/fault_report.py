"""Run every fault drill and print one table: does the plugin survive failures, and how fast does it notice?

    python benchmarks/fault_report.py            # all drills, a few minutes on 2 cores
    python benchmarks/fault_report.py --quick    # fewer fuzz examples and fewer jobs in the many-jobs drill

Columns: drill, what was injected, expected outcome, observed outcome, time to detect (seconds from the injection
to the failure being reported; for drills that ride a fault out, the time to finish), processes or objects left
behind, and whether data was lost (a job lost or duplicated, outputs that differ from an uninterrupted run).

Drills 1, 2, 3, 5 are local (tests/faults/drills_local.py), 4 is retry-with-resume (tests/faults/drills_retry.py),
6-10 talk to a fake Kubernetes API (tests/faults/drills_backend.py), 11 is fuzzing (tests/faults/test_fuzz.py),
12-13 are retryable-or-permanent (tests/faults/drills_contract.py): a non-recoverable error, a recoverable one and
an OOM-killed replica, through the connector against the fake API (12) and end to end with real replicas (13);
their observed column says the phase, whether Flyte would retry, and the message's first line. 14-19 are the
connector's reliability from outside (tests/faults/drills_reliability.py): the time each of create, get and delete
takes to answer under a hung, a refusing and a 500-forever API at the shipped budgets (14), response bodies echoing a
bearer token and an env value through flytekit's connector service (15), malformed answers (16), images the SDK
refuses and a 413 (17-18), a job suspended in its spec (19).
A drill that cannot run (a module not there yet) is a row saying so, not a crash of the report.

    python benchmarks/fault_report.py --only 12 --only 13    # just the retryable-or-permanent drills
    python benchmarks/fault_report.py --only 14 --only 15 --only 16 --only 17 --only 19   # the reliability drills
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

COLUMNS = ("drill", "injected", "expected", "observed", "detect", "left behind", "data lost")
WIDTHS = (26, 34, 34, 46, 8, 11, 9)
OBSERVED_MAX = 320
LOCAL = {"sigkill": "1", "raise": "2", "hang": "3", "sigterm": "5a", "sigint": "5b"}


def _local(name: str) -> Callable[[], dict[str, Any]]:
    def run() -> dict[str, Any]:
        from tests.faults.drills_local import run_drill

        report = run_drill(name)
        report.pop("error", None)
        leftover = report.pop("leftover_procs", [])
        return {
            "drill": f"{LOCAL[name]} {name}",
            "injected": report["injected"],
            "expected": report["expected"],
            "observed": report.get("observed", f"exit code {report.get('returncode')}"),
            "detect_s": report.get("detect_s"),
            "leftover": len(leftover),
            "data_lost": False,  # nothing to lose: the task fails, no output is written
        }

    return run


def _from(module: str, function: str, **kwargs: Any) -> Callable[[], dict[str, Any]]:
    def run() -> dict[str, Any]:
        return getattr(importlib.import_module(module), function)(**kwargs)

    return run


def drills(quick: bool) -> list[tuple[str, Callable[[], dict[str, Any]]]]:
    """Every drill in report order, as (label for errors, zero-argument runner returning a row)."""
    return [
        *[(f"{LOCAL[n]} {n}", _local(n)) for n in LOCAL],
        ("4 retry-resume", _from("tests.faults.drills_retry", "drill_retry_resume")),
        ("6 flaky API", _from("tests.faults.drills_backend", "drill_flaky_api")),
        ("7 409 AlreadyExists", _from("tests.faults.drills_backend", "drill_conflict")),
        ("8 deleted behind our back", _from("tests.faults.drills_backend", "drill_deleted_behind_back")),
        ("9 many jobs", _from("tests.faults.drills_backend", "drill_many_jobs", **({"n": 200} if quick else {}))),
        ("10 403 Forbidden", _from("tests.faults.drills_backend", "drill_forbidden")),
        (
            "11 fuzzing",
            _from(
                "tests.faults.test_fuzz",
                "drill_fuzz_summary",
                **({"sdk_examples": 60, "template_examples": 300} if quick else {}),
            ),
        ),
        *_contract_drills(),
        ("14 deadlines", _from("tests.faults.drills_reliability", "drill_deadlines")),
        ("15 bodies with secrets", _from("tests.faults.drills_reliability", "drill_no_bodies")),
        ("16 malformed answers", _from("tests.faults.drills_reliability", "drill_malformed")),
        ("17-18 bad images, 413", _from("tests.faults.drills_reliability", "drill_images_and_413")),
        ("19 suspended", _from("tests.faults.drills_reliability", "drill_suspended")),
    ]


def _contract_drills() -> list[tuple[str, Callable[[], dict[str, Any]]]]:
    """Drills 12 (fake API) and 13 (end to end): non-recoverable error, recoverable error, OOM-killed replica."""
    cases = ("non-recoverable", "recoverable", "oom-killed")
    rows: list[tuple[str, Callable[[], dict[str, Any]]]] = []
    for number, function in (("12 fake API", "drill_fake_api"), ("13 e2e", "drill_e2e")):
        for case in cases:
            rows.append((f"{number} {case}", _contract(function, case)))
    return rows


def _contract(function: str, case: str) -> Callable[[], dict[str, Any]]:
    def run() -> dict[str, Any]:
        row = getattr(importlib.import_module("tests.faults.drills_contract"), function)(case)
        row["observed"] = {k: v for k, v in row["observed"].items() if k != "full_message"}  # the JSON keeps it
        return row

    return run


def run_all(quick: bool, only: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Run every drill (or those whose label starts with one of `only`); a drill that raises becomes a row with the
    error as its observed outcome."""
    rows = []
    for label, run in drills(quick):
        if only and not label.startswith(only):
            continue
        start = time.monotonic()
        try:
            row = run()
        except ModuleNotFoundError as e:
            row = {"drill": label, "injected": "-", "expected": "-", "observed": f"NOT RUN: {e}", "detect_s": None,
                   "leftover": None, "data_lost": None}  # fmt: skip
        except Exception as e:  # noqa: BLE001 - one broken drill must not hide the others' results
            row = {"drill": label, "injected": "-", "expected": "-", "observed": f"DRILL ERROR {type(e).__name__}: {e}",
                   "detect_s": None, "leftover": None, "data_lost": None}  # fmt: skip
        row["wall_s"] = round(time.monotonic() - start, 1)
        rows.append(row)
        print(f"  ran {label} in {row['wall_s']} s", file=sys.stderr, flush=True)
    return rows


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return "; ".join(f"{k}={_text(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_text(v) for v in value) or "none"
    text = " ".join(str(value).split("--- traceback")[0].split())  # tracebacks are in the JSON, not the table
    return text if len(text) <= OBSERVED_MAX else text[: OBSERVED_MAX - 3] + "..."


def format_table(rows: list[dict[str, Any]]) -> str:
    """One plain-text table, cells wrapped to fixed widths.

    Args:
        rows: drill rows (``drill, injected, expected, observed, detect_s, leftover, data_lost``).

    Returns:
        The table as text.
    """
    lines = [" | ".join(c.ljust(w) for c, w in zip(COLUMNS, WIDTHS, strict=True))]
    lines.append("-+-".join("-" * w for w in WIDTHS))
    for row in rows:
        detect = row.get("detect_s")
        cells = [
            _text(row.get("drill")),
            _text(row.get("injected")),
            _text(row.get("expected")),
            _text(row.get("observed")),
            "-" if detect is None else f"{detect:.2f}s",
            _text(row.get("leftover")),
            _text(row.get("data_lost")),
        ]
        wrapped = [textwrap.wrap(c, w) or [""] for c, w in zip(cells, WIDTHS, strict=True)]
        for i in range(max(len(w) for w in wrapped)):
            lines.append(
                " | ".join((w[i] if i < len(w) else "").ljust(width) for w, width in zip(wrapped, WIDTHS, strict=True))
            )
        lines.append("-+-".join("-" * w for w in WIDTHS))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the drills and print the table (and, with ``--json PATH``, write the rows as JSON).

    Args:
        argv: command-line arguments (default: sys.argv[1:]).

    Returns:
        0 when every drill ran, 1 when one could not run or errored.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer fuzz examples and jobs (about a minute less)")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    parser.add_argument(
        "--only", action="append", default=[], metavar="PREFIX", help="run only drills whose label starts so (repeat)"
    )
    args = parser.parse_args(argv)
    start = time.monotonic()
    rows = run_all(args.quick, tuple(args.only))
    print(format_table(rows))
    print(f"\n{len(rows)} drills in {time.monotonic() - start:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2, default=str) + "\n")
    broken = [r for r in rows if str(r.get("observed", "")).startswith(("NOT RUN", "DRILL ERROR"))]
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())

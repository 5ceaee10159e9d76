"""`python -m devcluster build | up | down`: a real Kubernetes control plane and its controllers on one machine,
built from the Go module proxy, for the cluster test tier and for contributors (see docs/testing.md)."""

from __future__ import annotations

import argparse
import sys

from devcluster import build
from devcluster.components import CONTROLLERS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build (or reuse from the cache) every component's binaries")
    b.add_argument("components", nargs="*", help="only these (default: all)")
    u = sub.add_parser("up", help="start the cluster; prints KUBECONFIG=<path> last")
    u.add_argument(
        "--controllers",
        default=",".join(CONTROLLERS),
        help=f"comma-separated, of {', '.join(CONTROLLERS)} (default: all four; trainer brings jobset)",
    )
    u.add_argument(
        "--flyte",
        action="store_true",
        help="also run Flyte's propeller v1.16.8 (no flyteadmin: see docs/cluster.md), with our connector or Flyte's "
        "PyTorch plugin for `pytorch` tasks",
    )
    u.add_argument(
        "--flyte-plugin",
        choices=("connector", "builtin"),
        help="with --flyte: propeller runs `pytorch` tasks through our connector (default) or Flyte's built-in "
        "PyTorch plugin (PyTorchJobs only)",
    )
    u.add_argument(
        "--target",
        choices=("pytorchjob", "trainjob", "jobset"),
        help="with --flyte: the job kind the connector creates (default pytorchjob)",
    )
    sub.add_parser("down", help="stop everything up started and remove what it made")
    args = parser.parse_args(argv)
    if args.command == "build":
        unknown = [c for c in args.components if c not in build.BY_NAME]
        if unknown:
            parser.error(f"unknown component(s) {', '.join(unknown)}: choose among {', '.join(build.BY_NAME)}")
        try:
            build.build(args.components or None)
        except build.BuildError as e:
            print(f"devcluster build: {e}", file=sys.stderr)
            return 1
        return 0
    # up and down need the `kubernetes` client and PyYAML (the test and cluster extras); build needs Python alone
    from devcluster import cluster

    if args.command == "up":
        names = tuple(n.strip() for n in args.controllers.split(",") if n.strip())
        flyte = None
        if args.flyte:
            from devcluster.flyte import FlyteSetup

            try:
                flyte = FlyteSetup(args.flyte_plugin or "connector", args.target or "pytorchjob")
            except ValueError as e:
                parser.error(str(e))
        elif args.flyte_plugin or args.target:
            parser.error("--flyte-plugin and --target go with --flyte")
        try:
            cluster.up(names, flyte=flyte)
        except (cluster.UpError, build.BuildError, TimeoutError, RuntimeError) as e:
            print(
                f"devcluster up: {e}\n(what was started stays recorded: `python -m devcluster down` stops it)",
                file=sys.stderr,
            )
            return 1
        return 0
    cluster.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())

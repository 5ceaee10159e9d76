"""`python -m devcluster.flyte_events --port P`: the stand-in for flyteadmin's event endpoints, for propeller's event
sink on a cluster without flyteadmin.

Propeller reports every workflow, node and task transition to admin (`event.type: admin`: AdminService's
CreateWorkflowEvent, CreateNodeEvent and CreateTaskEvent). Its other sinks (`log`, `file`) keep only the phase
(flytepropeller `events/local_eventsink.go` writes one line of id, phase and time), not what a Flyte user sees in the
console: a task's log links, its reason (the message), its error. This server answers those three calls as admin
does when it accepts an event, and writes each event on stdout as one JSON line
(`{"kind": "workflow"|"node"|"task", "event": <the event as protobuf's JSON>}`), which the node agent keeps as the
pod's log and the cluster tier reads. Every other AdminService call is unimplemented.

What admin does and this does not: store the events, refuse one that contradicts what it has (a phase going back,
an event after a terminal one: propeller then drops the event), serve them back by API.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from concurrent import futures

import grpc
from flyteidl.admin import event_pb2
from flyteidl.service import admin_pb2_grpc
from google.protobuf import json_format

_lock = threading.Lock()


def _write(kind: str, message) -> None:  # noqa: ANN001 - a flyteidl event message
    line = json.dumps({"kind": kind, "event": json_format.MessageToDict(message)}, separators=(",", ":"))
    with _lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class EventRecorder(admin_pb2_grpc.AdminServiceServicer):
    """AdminService's three event calls; everything else answers UNIMPLEMENTED (the servicer's default)."""

    def CreateWorkflowEvent(self, request, context):  # noqa: ANN001, N802 - gRPC's names
        _write("workflow", request.event)
        return event_pb2.WorkflowExecutionEventResponse()

    def CreateNodeEvent(self, request, context):  # noqa: ANN001, N802
        _write("node", request.event)
        return event_pb2.NodeExecutionEventResponse()

    def CreateTaskEvent(self, request, context):  # noqa: ANN001, N802
        _write("task", request.event)
        return event_pb2.TaskExecutionEventResponse()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster.flyte_events", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    admin_pb2_grpc.add_AdminServiceServicer_to_server(EventRecorder(), server)
    # the pod's own network namespace: reachable through the Service only
    server.add_insecure_port(f"[::]:{args.port}")
    server.start()
    print(f"flyte events: serving AdminService's event calls on port {args.port}", file=sys.stderr, flush=True)
    server.wait_for_termination()
    return 0


if __name__ == "__main__":
    sys.exit(main())

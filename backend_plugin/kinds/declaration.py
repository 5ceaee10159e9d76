"""What a job kind declares about itself, as plain facts the neutral rooms read: `Declaration`.

Each kind's module (`backend_plugin/kinds/<kind>.py`) fills one: its API coordinates, its vendored CRD
and the upstream release it comes from, where its pod templates are in a job, which env lists it writes outside
them and their limits, its section of the backend config, and how its own job paths are named in the user's terms.
The admission model, the config, the connector, the CLI and the test API server take these facts as values and never
name a kind. Declarations import no writer, status or connector code (the config reads them while it is built).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional, Union

from backend_plugin.settings import Section

__all__ = [
    "Declaration",
    "Crd",
    "CrdRelease",
    "CrdHistory",
    "PodTemplates",
    "Limits",
    "KindCheck",
    "ANY",
    "Path",
    "GeneratedName",
    "expand",
    "no_setting_names",
    "no_generated_names",
    "no_checks",
]

Path = tuple[Union[str, int], ...]
"""A path into a job: mapping keys and list indexes."""

ANY = "*"
"""In a path pattern: every key of a mapping, or every index of a list, at that place."""

GeneratedName = tuple[str, str]
"""A name a kind's controllers derive from a job's name, and what they give it to: (`<job>-worker-3`, `Worker pod and
Service`)."""


@dataclass(frozen=True)
class Crd:
    """A kind's vendored CRD.

    Attributes:
        file: its file under `backend_plugin/crds/` (provenance in `PROVENANCE.md` there).
        release: the upstream release it comes from, for messages (`kubeflow/trainer v2.3.0`).
    """

    file: str
    release: str


@dataclass(frozen=True)
class CrdRelease:
    """A release of a kind's controller, known by fields its CRD declares and the release before it does not.

    Attributes:
        name: the release, for messages (`Trainer v2.2`).
        declares: path patterns into a job (`ANY` for every key or index) that its CRD first declares.
    """

    name: str
    declares: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class CrdHistory:
    """What a kind knows of its CRD's older releases, to name the release a cluster runs (by what its installed CRD
    declares) and what to upgrade.

    Attributes:
        controller: what a cluster upgrades to get a newer CRD (`Kubeflow Trainer`, `the training operator`); ""
            for the kind's `description`.
        releases: newest first, each known by fields its CRD first declares.
        before: the name of whatever is older than the last of `releases` (`training operator v1.7 or earlier`); ""
            when nothing older is known.
    """

    controller: str = ""
    releases: tuple[CrdRelease, ...] = ()
    before: str = ""


@dataclass(frozen=True)
class PodTemplates:
    """Where a kind's jobs hold pod templates.

    Attributes:
        pattern: the path of each template (the object holding `metadata` and `spec`), `ANY` where a role or an index
            varies: `("spec", "pytorchReplicaSpecs", ANY, "template")`.
        setting: the user's name for a template, `{0}`, `{1}`, ... standing for what `ANY` matched
            (`"{0}.pod_template"` -> `Worker.pod_template`); or, where what `ANY` matched is a list index that does
            not name the role, a function of the job and what `ANY` matched that returns the name.
    """

    pattern: tuple[str, ...]
    setting: Union[str, Callable[[Mapping[str, Any], tuple[Any, ...]], str]]

    def name(self, job: Mapping[str, Any], matched: tuple[Any, ...]) -> str:
        """The user's name for the template that `pattern` matched in `job` with `matched`.

        Args:
            job: the job.
            matched: what each `ANY` of `pattern` matched.

        Returns:
            The setting's name.
        """
        return self.setting(job, matched) if callable(self.setting) else self.setting.format(*matched)


@dataclass(frozen=True)
class Limits:
    """What a kind's CRD limits beyond its schema's shape, and how its size adds up.

    Attributes:
        env_paths: env lists the kind's writer puts outside any pod template (`("spec", "trainer", "env")`).
        env_max_items: `maxItems` of those lists (counting what the writer adds); None for no limit.
        copies_note: said with a job too large that holds more than one pod template (why its values count more than
            once); "" for none.
        resource_paths: `ResourceRequirements` the kind's writer puts outside any pod template, which its controller
            gives the training container (`("spec", "trainer", "resourcesPerNode")`).
    """

    env_paths: tuple[tuple[str, ...], ...] = ()
    env_max_items: Optional[int] = None
    copies_note: str = ""
    resource_paths: tuple[tuple[str, ...], ...] = ()


class KindCheck(NamedTuple):
    """One finding of a kind's own admission rules: what its validating webhook refuses beyond the CRD's schema, or
    what the API server refuses in the objects its controller creates from the job.

    Attributes:
        path: where in the job (the user's setting is named from it).
        message: what is wrong and what to do.
        verdict: `rejected` (the create fails), `unstartable` (the job is created but its controller cannot create
            what it needs from it: no pod ever runs) or `note` (said, not refused: a rule that depends on how the
            cluster is configured).
    """

    path: Path
    message: str
    verdict: str = "rejected"


@dataclass(frozen=True)
class Declaration:
    """Everything the neutral rooms need to know about one job kind.

    Attributes:
        kind: the object's `kind`.
        group: API group.
        version: API version.
        plural: resource name in URLs and RBAC.
        config_name: its `BackendConfig.target` value, the key of its config section, and `render --target`.
        description: the CRD and its controller, for messages (`<plural>.<group> (<controller>)`).
        pod_label: the pod label whose value is the job's name.
        status_keys: `status` fields copied into the connector's `custom_info`.
        crd: its vendored CRD.
        pod_templates: where its jobs hold pod templates.
        primary_containers: names of the training container in those templates (its env is the task's
            `environment`).
        limits: what its CRD limits beyond the schema's shape.
        settings: its section of the backend config (built with defaults when the config does not name it).
        package: the kind's package, whose `target` module holds its `JobTarget` (`TARGET`).
        setting_names: the user's setting that wrote a path of the kind's own (outside pod templates, metadata and
            `limits.env_paths`), or None to leave it to the neutral naming; by default None for every path.
        generated_names: the longest name of each kind of object the kind's controllers name after one of its jobs
            (pods, Services, Jobs), as the webhook or API server that checks it spells it; each must be a DNS-1035
            label of at most 63 characters, so they bound the job's own name (`render --name`). By default none.
        checks: the kind's own admission rules beyond its CRD (its webhook's, the rules of the objects its controller
            creates), run by the admission model on every job of the kind; by default none.
        history: the releases of its CRD the kind knows by what they declare (`admission.installed` names the release
            a cluster's CRD is from); by default none.
        delete_propagation: the `propagationPolicy` the connector deletes a job with: by default `Foreground` (the
            job stays, marked, until the garbage collector has deleted what its controller made); `Background` for a
            kind whose controller makes its objects again while the job waits in a foreground delete.
    """

    kind: str
    group: str
    version: str
    plural: str
    config_name: str
    description: str
    pod_label: str
    status_keys: tuple[str, ...]
    crd: Crd
    pod_templates: tuple[PodTemplates, ...]
    primary_containers: tuple[str, ...]
    limits: Limits
    settings: type[Section]
    package: str
    setting_names: Callable[[Path], Optional[str]] = field(default_factory=lambda: no_setting_names)
    generated_names: Callable[[Mapping[str, Any]], tuple[GeneratedName, ...]] = field(
        default_factory=lambda: no_generated_names
    )
    checks: Callable[[Mapping[str, Any]], list[KindCheck]] = field(default_factory=lambda: no_checks)
    history: CrdHistory = field(default_factory=CrdHistory)
    delete_propagation: str = "Foreground"

    @property
    def api_version(self) -> str:
        """`<group>/<version>`."""
        return f"{self.group}/{self.version}"

    @property
    def crd_name(self) -> str:
        """The name of its CustomResourceDefinition (`<plural>.<group>`)."""
        return f"{self.plural}.{self.group}"

    @property
    def controller(self) -> str:
        """What a cluster upgrades to get a newer CRD of this kind, for messages."""
        return self.history.controller or self.description

    def pod_template_paths(self, job: Mapping[str, Any]) -> list[tuple[Path, str]]:
        """Every embedded pod template of one of this kind's jobs, with the user's name for it.

        Args:
            job: a job of this kind.

        Returns:
            (path of the template, i.e. the object holding `metadata` and `spec`; its setting), in job order.
        """
        return [
            (path, templates.name(job, matched))
            for templates in self.pod_templates
            for path, matched in expand(job, templates.pattern)
        ]


def no_setting_names(path: Path) -> Optional[str]:
    """The default `Declaration.setting_names`: the kind names none of its own paths.

    Args:
        path: a path into a job.

    Returns:
        None.
    """
    return None


def no_generated_names(job: Mapping[str, Any]) -> tuple[GeneratedName, ...]:
    """The default `Declaration.generated_names`: the kind's controllers name nothing after the job.

    Args:
        job: a job of the kind.

    Returns:
        No names.
    """
    return ()


def no_checks(job: Mapping[str, Any]) -> list[KindCheck]:
    """The default `Declaration.checks`: the kind has no admission rules beyond its CRD.

    Args:
        job: a job of the kind.

    Returns:
        No finding.
    """
    return []


def expand(obj: Any, pattern: tuple[str, ...]) -> Iterator[tuple[Path, tuple[Any, ...]]]:
    """The concrete paths of `obj` that `pattern` matches, with what each `ANY` matched.

    Args:
        obj: a JSON-like object.
        pattern: keys, `ANY` standing for every key of a mapping or every index of a list.

    Yields:
        (path, the keys or indexes `ANY` matched), in the object's order; a path that leads nowhere yields nothing.
    """

    def walk(value: Any, rest: tuple[str, ...], path: Path, matched: tuple[Any, ...]) -> Iterator:
        if not rest:
            yield path, matched
            return
        head, tail = rest[0], rest[1:]
        if head != ANY:
            if isinstance(value, Mapping) and head in value:
                yield from walk(value[head], tail, (*path, head), matched)
            return
        items = value.items() if isinstance(value, Mapping) else enumerate(value) if isinstance(value, list) else ()
        for key, item in items:
            yield from walk(item, tail, (*path, key), (*matched, key))

    yield from walk(obj, pattern, (), ())

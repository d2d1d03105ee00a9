"""Kubernetes manifests in, internal objects out — or a precise error.

This is the one place a batch admin's YAML is read. Each document is decoded
into the wire Structs of ``events.api`` (unknown fields and wrong types are
refused with their path) and then checked the way Kueue's webhooks and CRD rules
check it, before it is normalised into ``events.objects``. Every refusal is a
:class:`ManifestError` naming the file, the document, the object and the field.

Things Kueue accepts but cannot use (a ClusterQueue naming a missing flavor, a
LocalQueue pointing nowhere) are *not* errors here: the scheduler reports them
as inactive or pending, as Kueue does.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any, Final, NoReturn, TypeVar

import msgspec
import yaml

from events import api, checks_manifest, dra, jobkinds, multikueue_manifest, t9k
from events import objects as o
from events import validation as v
from events.afs_manifest import admission_scope, consumed_resources
from events.cluster import (
    KUEUE_CONFIG_GROUP,
    KUEUE_GROUP,
    POD_PRIORITY_CLASS_SOURCE,
    RECLAIM_WITHIN_ANNOTATION,
    WORKLOAD_PRIORITY_CLASS_SOURCE,
    ConditionStatus,
    ConditionType,
)
from events.configuration import read_configuration
from events.generatename import content_digest, free_name
from events.jobkinds import prebuilt, trainjob
from events.jobs import job_to_workload
from events.podspec import ObjectError, pod_set_from_template, selector_from_api
from events.quantity import QuantityError, parse_fraction, to_amount

KUEUE_VERSIONS = ("v1beta1", "v1beta2")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SURROGATE = re.compile("[\ud800-\udfff]")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
MAX_RESOURCE_GROUPS = 16
MAX_FLAVORS_PER_GROUP = 64
MAX_RESOURCES_PER_GROUP = 64
MAX_POD_SETS = v.MAX_POD_SETS
# Kueue >= 0.14 webhook limits across a ClusterQueue's resource groups (pkg/webhooks/clusterqueue_webhook.go).
MAX_TOTAL_FLAVORS = 256
MAX_TOTAL_COVERED_RESOURCES = 256
MAX_FLAVOR_RESOURCES_PER_GROUP = 512
MAX_FLAVOR_TAINTS = 8
MAX_FLAVOR_TOLERATIONS = 8


class ManifestError(ValueError):
    """A manifest Kueue (or Kubernetes) would refuse, located precisely."""

    def __init__(self, file: str, document: int, obj: str, field: str, message: str) -> None:
        self.file, self.document, self.obj, self.field, self.message = file, document, obj, field, message
        where = f"{file}: document {document}"
        if obj:
            where += f" ({obj})"
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")


@dataclass(frozen=True)
class Document:
    file: str
    index: int  # 1-based position in its file
    body: Any


class _NoTimestampLoader(yaml.SafeLoader):
    """Safe YAML without implicit timestamps: times stay strings, parsed by us (RFC 3339).

    A key written twice in one mapping is an error, as it is for kubectl and the API server;
    PyYAML would silently keep the last value (two ``nominalQuota`` lines, say).

    Bounded: a document nested deeper than ``MAX_NESTING`` (aliases count with the depth of what
    they stand for) or standing for more than ``MAX_YAML_NODES`` nodes once its aliases are
    expanded is refused while it is composed, before PyYAML's recursion or the expansion can
    exhaust the stack or the memory; an integer too long for Python's ``int()`` is refused
    with its line."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._shape: dict[int, tuple[int, int]] = {}  # id(node) -> (height, expanded size)

    def compose_document(self) -> yaml.Node | None:
        self._shape = {}
        return super().compose_document()

    def _refuse(self, problem: str) -> NoReturn:
        raise yaml.composer.ComposerError(None, None, problem, self.peek_event().start_mark)  # type: ignore[no-untyped-call]

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        alias = self.check_event(yaml.AliasEvent)
        if not alias:
            self._depth += 1
            if self._depth > v.MAX_NESTING:
                self._refuse(f"nested deeper than {v.MAX_NESTING} levels")
        try:
            node: yaml.Node | None = super().compose_node(parent, index)
        finally:
            if not alias:
                self._depth -= 1
        if node is None:
            return node
        if alias:
            shape = self._shape.get(id(node))  # measured once it was complete
            if shape is None:
                self._refuse("an alias refers to a node that contains it")
            height, size = shape
            if self._depth + height > v.MAX_NESTING:
                self._refuse(f"an alias nests the document deeper than {v.MAX_NESTING} levels")
        else:
            height, size = self._measure(node)
        if size > v.MAX_YAML_NODES:
            self._refuse(f"aliases expand the document to more than {v.MAX_YAML_NODES} nodes")
        return node

    def _measure(self, node: yaml.Node) -> tuple[int, int]:
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        shapes = [self._shape.get(id(c), (1, 1)) for c in children]
        shape = (1 + max((h for h, _ in shapes), default=0), 1 + sum(n for _, n in shapes))
        self._shape[id(node)] = shape
        return shape

    def construct_scalar(self, node: yaml.ScalarNode | yaml.MappingNode) -> Any:
        value = super().construct_scalar(node)
        if isinstance(value, str) and _SURROGATE.search(value):
            # "\ud800" escapes a half of a UTF-16 pair, which is not text: nothing could encode it.
            raise yaml.constructor.ConstructorError(
                None, None, "a string with an unpaired surrogate escape is not text", node.start_mark
            )
        return value

    def construct_bounded_int(self, node: yaml.ScalarNode) -> int:
        try:
            return self.construct_yaml_int(node)
        except ValueError:
            raise yaml.constructor.ConstructorError(
                None, None, f"integer of {len(node.value)} characters is too long", node.start_mark
            ) from None

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:  # unhashable: the base class reports it
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, f"found duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_NoTimestampLoader.add_constructor("tag:yaml.org,2002:int", _NoTimestampLoader.construct_bounded_int)
_NoTimestampLoader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def read_documents(file: str, text: str) -> list[Document]:
    """Split a multi-document YAML stream; empty documents are skipped but keep their number."""
    bodies: list[Any] = []
    try:
        bodies.extend(yaml.load_all(text, Loader=_NoTimestampLoader))  # extend keeps what was read before an error
    except yaml.YAMLError as e:
        # The stream is read document by document, so the broken one is the next one.
        mark = getattr(e, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        raise ManifestError(file, len(bodies) + 1, "", "", f"invalid YAML{line}: {getattr(e, 'problem', e)}") from e
    docs: list[Document] = []
    for i, body in enumerate(bodies, start=1):
        if body is None:
            continue
        if isinstance(body, dict) and body.get("kind") == "List" and isinstance(body.get("items"), list):
            docs.extend(Document(file, i, item) for item in body["items"])
            continue
        docs.append(Document(file, i, body))
    return docs


def parse_time(value: str) -> o.Millis:
    """RFC 3339 time to milliseconds since the epoch."""
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    dt = datetime.fromisoformat(text)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return o.Millis(int(dt.timestamp() * 1000))


def format_time(ms: int) -> str:
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    if ms % 1000:
        return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


T = TypeVar("T")


_NOT_YET: Final = {
    "concurrentAdmissionPolicy": "not supported by kueuelog yet (Kueue's concurrent admission policy, feature "
                                 "gate ConcurrentAdmission); remove it",
    "preemptionGates": "not supported by kueuelog yet (Kueue's preemption gates, feature gates ConcurrentAdmission "
                       "and MultiKueueOrchestratedPreemption); remove it",
    "quotaCheckStrategy": "not supported by kueuelog yet (Kueue's quota check strategy, feature gate "
                          "QuotaCheckStrategy); remove it",
}
"""Fields of Kueue's API that kueuelog does not act on yet: refused by name, never ignored."""


class _Ctx:
    """Where we are, so that every error can say so."""

    def __init__(self, doc: Document, kind: str, name: str) -> None:
        self.doc, self.kind, self.name = doc, kind, name

    def error(self, field: str, message: str) -> ManifestError:
        return ManifestError(self.doc.file, self.doc.index, f"{self.kind} {self.name}".strip(), field, message)

    def convert(self, value: Any, typ: type[T], field: str) -> T:
        try:
            return msgspec.convert(value, typ)
        except msgspec.ValidationError as e:
            text = str(e)
            path = ""
            m = re.search(r" - at `\$(.*)`$", text)
            if m:
                text = text[: m.start()]
                path = m.group(1)
            m2 = re.match(r"Object contains unknown field `(.+)`", text)
            if m2:
                path += "." + m2.group(1)
                text = _NOT_YET.get(m2.group(1), "unknown field")
            elif text.startswith("Object missing required field"):
                req = re.search(r"`(.+)`", text)
                if req:
                    path += "." + req.group(1)
                text = "required field is missing"
            # A top-level body (Configuration) has no field of its own: no leading dot then.
            raise self.error((field + path).lstrip("."), text) from None

    def amount(self, resource: str, value: object, field: str) -> int:
        blanks = v.quantity_blanks(value)
        if blanks:
            raise self.error(field, blanks)
        try:
            # The sign is judged on the exact value: "-100m" of memory is negative even though
            # rounding up would make it 0 (Kueue compares the Quantity itself with 0).
            negative = parse_fraction(value) < 0
            amount = to_amount(resource, value)
        except QuantityError as e:
            raise self.error(field, str(e)) from None
        if negative:
            raise self.error(field, f"must be greater than or equal to 0, got {value!r}")
        try:
            return v.amount(amount, field)
        except v.Invalid as e:
            raise self.error(e.field, e.message) from None


# Every apiVersion and kind kueuelog takes, in the order the refusal lists them; anything else is
# refused as an unsupported kind before any of its fields is looked at.
SUPPORTED_KINDS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (tuple(f"{KUEUE_GROUP}/{v}" for v in KUEUE_VERSIONS),
     ("AdmissionCheck", "ClusterQueue", "Cohort", "LocalQueue", "ProvisioningRequestConfig", "ResourceFlavor",
      "Workload", "WorkloadPriorityClass", "MultiKueueConfig", "MultiKueueCluster")),
    ((f"{KUEUE_GROUP}/v1alpha1",), ("Cohort",)),
    (tuple(f"{KUEUE_CONFIG_GROUP}/{v}" for v in KUEUE_VERSIONS), ("Configuration",)),
    (("v1",), ("Namespace", "ConfigMap")),
    (("scheduling.k8s.io/v1",), ("PriorityClass",)),
    (("batch/v1",), ("Job",)),
    (dra.API_VERSIONS, (dra.KIND,)),
    ((t9k.API_VERSION,), ("Queue",)),
    *(((versions, (*kinds, *trainjob.RUNTIME_KINDS)) if versions == (trainjob.API_VERSION,) else (versions, kinds))
      for versions, kinds in jobkinds.by_api_version(jobkinds.OTHER_KINDS)),  # a TrainJob's runtimes with it
)
_PLAIN = re.compile(r"^[A-Za-z0-9][-A-Za-z0-9./_]{0,99}$")


def supported_kinds_text() -> str:
    parts = []
    for versions, kinds in SUPPORTED_KINDS:
        first, *more = versions
        spelled = " and ".join([first, *(m.rpartition("/")[2] for m in more)])
        parts.append(f"{spelled} {', '.join(kinds)}")
    return "; ".join(parts)


def _unsupported(kind: str, api_version: str) -> tuple[str, str] | None:
    """``(field, message)`` for an apiVersion/kind we do not take, else ``None``."""
    if any(kind in kinds and api_version in versions for versions, kinds in SUPPORTED_KINDS):
        return None
    known_kind = any(kind in kinds for _, kinds in SUPPORTED_KINDS)

    def shown(text: str) -> str:
        return text if _PLAIN.fullmatch(text) else repr(text[:100])

    return ("apiVersion" if known_kind else "kind",
            f"unsupported kind {shown(kind)} (apiVersion {shown(api_version)}); kueuelog takes "
            f"{supported_kinds_text()}")


def _meta(doc: Document) -> tuple[str, str, api.ObjectMeta]:
    body = doc.body
    if not isinstance(body, dict):
        raise ManifestError(doc.file, doc.index, "", "", f"expected a Kubernetes object, got {type(body).__name__}")
    kind = body.get("kind")
    if not isinstance(kind, str) or not kind:
        raise ManifestError(doc.file, doc.index, "", "kind", "required field is missing")
    if not isinstance(body.get("apiVersion"), str):
        raise ManifestError(doc.file, doc.index, kind, "apiVersion", "required field is missing")
    api_version = str(body["apiVersion"])
    refusal = _unsupported(kind, api_version)
    if refusal is not None:
        raw_meta = body.get("metadata")
        raw_name = raw_meta.get("name") if isinstance(raw_meta, dict) else None
        name = raw_name if isinstance(raw_name, str) and _PLAIN.fullmatch(raw_name) else ""
        raise ManifestError(doc.file, doc.index, f"{kind} {name}".strip(), *refusal)
    ctx = _Ctx(doc, kind, "")
    meta = ctx.convert(body.get("metadata") or {}, api.ObjectMeta, "metadata")
    return kind, api_version, meta


def _check_name(ctx: _Ctx, name: str | None, field: str, *, label: bool = False) -> str:
    if not name:
        raise ctx.error(field, "required field is missing")
    pattern, what, limit, chars = (
        (_DNS_LABEL, "RFC 1123 label", 63, " or '-'")
        if label
        else (_DNS_SUBDOMAIN, "RFC 1123 subdomain", 253, ", '-' or '.'")
    )
    if len(name) > limit or not pattern.fullmatch(name):
        raise ctx.error(
            field,
            f"invalid value {name!r}: a lowercase {what} must consist of lower case alphanumeric "
            f"characters{chars}, and must start and end with an alphanumeric character "
            f"(at most {limit} characters)",
        )
    return name


def _sorted_pairs(d: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((d or {}).items()))


def _check_resource_name(ctx: _Ctx, name: str, field: str) -> None:
    prefix, _, local = name.rpartition("/")
    if not _QUALIFIED_NAME.fullmatch(local) or len(local) > 63 or (prefix and not _DNS_SUBDOMAIN.fullmatch(prefix)):
        raise ctx.error(field, f"invalid resource name {name!r}")


def _resource_group_totals(ctx: _Ctx, groups: list[api.ResourceGroup]) -> None:
    """The size limits Kueue's ClusterQueue webhook puts on all resource groups together."""
    flavors = sum(len(g.flavors) for g in groups)
    if flavors > MAX_TOTAL_FLAVORS:
        raise ctx.error(
            "spec.resourceGroups",
            f"total number of flavors across all resourceGroups must be <= {MAX_TOTAL_FLAVORS}, got {flavors}",
        )
    covered = sum(len(g.covered_resources) for g in groups)
    if covered > MAX_TOTAL_COVERED_RESOURCES:
        raise ctx.error(
            "spec.resourceGroups",
            f"total number of covered resources across all resourceGroups must be <= "
            f"{MAX_TOTAL_COVERED_RESOURCES}, got {covered}",
        )
    for gi, g in enumerate(groups):
        pairs = sum(len(f.resources) for f in g.flavors)
        if pairs > MAX_FLAVOR_RESOURCES_PER_GROUP:
            raise ctx.error(
                f"spec.resourceGroups[{gi}]",
                f"number of flavor-resource combinations in a resourceGroup must be <= "
                f"{MAX_FLAVOR_RESOURCES_PER_GROUP}, got {pairs}",
            )


def _group_sizes(ctx: _Ctx, group: api.ResourceGroup, gpath: str) -> None:
    if not group.covered_resources:
        raise ctx.error(f"{gpath}.coveredResources", "must have at least 1 item")
    if len(group.covered_resources) > MAX_RESOURCES_PER_GROUP:
        raise ctx.error(f"{gpath}.coveredResources", f"must have at most {MAX_RESOURCES_PER_GROUP} items")
    if not group.flavors:
        raise ctx.error(f"{gpath}.flavors", "must have at least 1 item")
    if len(group.flavors) > MAX_FLAVORS_PER_GROUP:
        raise ctx.error(f"{gpath}.flavors", f"must have at most {MAX_FLAVORS_PER_GROUP} items")


def _quota(ctx: _Ctx, rq: api.ResourceQuota, qpath: str, *, has_parent: bool, owner: str, is_cohort: bool) -> o.Quota:
    """One flavor's quota of one resource; limits only under a parent (cohort)."""
    nominal = ctx.amount(rq.name, rq.nominal_quota, f"{qpath}.nominalQuota")
    borrowing = lending = None
    if rq.borrowing_limit is not None:
        if not has_parent:
            raise ctx.error(f"{qpath}.borrowingLimit", f"must be nil when {owner} is empty")
        borrowing = ctx.amount(rq.name, rq.borrowing_limit, f"{qpath}.borrowingLimit")
    if rq.lending_limit is not None:
        if not has_parent:
            raise ctx.error(f"{qpath}.lendingLimit", f"must be nil when {owner} is empty")
        lending = ctx.amount(rq.name, rq.lending_limit, f"{qpath}.lendingLimit")
        if not is_cohort and lending > nominal:
            raise ctx.error(f"{qpath}.lendingLimit",
                            f"must be less than or equal to the nominalQuota ({rq.lending_limit} > {rq.nominal_quota})")
    return o.Quota(nominal=nominal, borrowing_limit=borrowing, lending_limit=lending)


def _resource_groups(
    ctx: _Ctx, groups: list[api.ResourceGroup] | None, *, has_parent: bool, owner: str, is_cohort: bool = False
) -> tuple[o.ResourceGroup, ...]:
    """Kueue's ClusterQueue/Cohort resourceGroups rules (CRD markers + webhook).

    ``lendingLimit <= nominalQuota`` is a ClusterQueue rule only: a Cohort's lendingLimit may
    exceed its own nominalQuota, since it lends its children's quota too
    (``validationConfig.enforceNominalGreaterThanLending`` in Kueue's webhooks)."""
    groups = groups or []
    if len(groups) > MAX_RESOURCE_GROUPS:
        raise ctx.error("spec.resourceGroups", f"must have at most {MAX_RESOURCE_GROUPS} items")
    if not is_cohort:
        _resource_group_totals(ctx, groups)
    seen_resources: dict[str, int] = {}
    seen_flavors: dict[str, int] = {}
    out: list[o.ResourceGroup] = []
    for gi, group in enumerate(groups):
        gpath = f"spec.resourceGroups[{gi}]"
        _group_sizes(ctx, group, gpath)
        for ri, res in enumerate(group.covered_resources):
            _check_resource_name(ctx, res, f"{gpath}.coveredResources[{ri}]")
            if res in seen_resources:
                raise ctx.error(
                    f"{gpath}.coveredResources[{ri}]",
                    f"duplicate value {res!r}: a resource can be covered by only one resource group "
                    f"(already in spec.resourceGroups[{seen_resources[res]}])",
                )
            seen_resources[res] = gi
        flavors: list[o.FlavorQuotas] = []
        for fi, fq in enumerate(group.flavors):
            fpath = f"{gpath}.flavors[{fi}]"
            _check_name(ctx, fq.name, f"{fpath}.name")
            if fq.name in seen_flavors:
                raise ctx.error(
                    f"{fpath}.name",
                    f"duplicate value {fq.name!r}: a flavor can appear in only one resource group "
                    f"(already in spec.resourceGroups[{seen_flavors[fq.name]}])",
                )
            seen_flavors[fq.name] = gi
            if [r.name for r in fq.resources] != list(group.covered_resources):
                raise ctx.error(
                    f"{fpath}.resources",
                    f"must list exactly the coveredResources {list(group.covered_resources)} in the same "
                    f"order, got {[r.name for r in fq.resources]}",
                )
            quotas = [(rq.name, _quota(ctx, rq, f"{fpath}.resources[{qi}]", has_parent=has_parent, owner=owner,
                                       is_cohort=is_cohort)) for qi, rq in enumerate(fq.resources)]
            flavors.append(o.FlavorQuotas(name=fq.name, resources=tuple(quotas)))
        out.append(o.ResourceGroup(covered_resources=tuple(group.covered_resources), flavors=tuple(flavors)))
    return tuple(out)


def _enum(ctx: _Ctx, enum: type[T], value: str | None, default: T, field: str, aliases: Mapping[str, str] = {}) -> T:
    if value is None or value == "":
        return default
    value = aliases.get(value, value)
    try:
        return enum(value)  # type: ignore[call-arg]
    except ValueError:
        allowed = ", ".join(repr(str(m)) for m in enum.__members__.values())  # type: ignore[attr-defined]
        extra = ", ".join(repr(a) for a in aliases)
        raise ctx.error(
            field, f"unsupported value {value!r}: supported values: {allowed}{', ' + extra if extra else ''}"
        ) from None


def _weight(ctx: _Ctx, fs: api.FairSharing | None, field: str) -> int:
    if fs is None or fs.weight is None:
        return 1000
    weight = ctx.amount("cpu", fs.weight, f"{field}.weight")  # milli-units, like a cpu quantity
    # Kueue refuses a weight that would collapse to zero (pkg/webhooks/common.go validateFairSharing).
    if 0 < parse_fraction(fs.weight) <= Fraction(1, 10**9):
        raise ctx.error(f"{field}.weight", f"when not 0, weight must be > 1e-9, got {fs.weight!r}")
    return weight


def _spec(ctx: _Ctx, body: Mapping[str, Any], typ: type[T]) -> T:
    spec = body.get("spec")
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        raise ctx.error("spec", f"expected an object, got {type(spec).__name__}")
    return ctx.convert(spec, typ, "spec")


def _fungibility(ctx: _Ctx, ff: api.FlavorFungibility | None, version: str) -> o.FlavorFungibility:
    """flavorFungibility; v1beta1 also takes the deprecated ``Borrow`` / ``Preempt`` (both mean
    ``MayStopSearch``), which v1beta2's enum no longer lists."""
    if ff is None:
        return o.FlavorFungibility()
    borrow_aliases = {"Borrow": "MayStopSearch"} if version == "v1beta1" else {}
    preempt_aliases = {"Preempt": "MayStopSearch"} if version == "v1beta1" else {}
    out = o.FlavorFungibility(
        when_can_borrow=_enum(
            ctx, o.WhenCanBorrow, ff.when_can_borrow, o.WhenCanBorrow.MAY_STOP_SEARCH,
            "spec.flavorFungibility.whenCanBorrow", borrow_aliases,
        ),
        when_can_preempt=_enum(
            ctx, o.WhenCanPreempt, ff.when_can_preempt, o.WhenCanPreempt.TRY_NEXT_FLAVOR,
            "spec.flavorFungibility.whenCanPreempt", preempt_aliases,
        ),
        preference=(
            None
            if ff.preference is None
            else _enum(
                ctx, o.FungibilityPreference, ff.preference, o.FungibilityPreference.BORROWING_OVER_PREEMPTION,
                "spec.flavorFungibility.preference",
            )
        ),
    )
    if out.preference is not None and (
        out.when_can_borrow != o.WhenCanBorrow.TRY_NEXT_FLAVOR
        or out.when_can_preempt != o.WhenCanPreempt.TRY_NEXT_FLAVOR
    ):
        raise ctx.error(
            "spec.flavorFungibility.preference",
            f"preference {str(out.preference)!r} requires both whenCanBorrow and whenCanPreempt to be TryNextFlavor",
        )
    return out


def _cluster_queue(ctx: _Ctx, body: Mapping[str, Any], version: str) -> o.ClusterQueue:
    spec = _spec(ctx, body, api.ClusterQueueSpec)
    if version == "v1beta1" and spec.cohort_name is not None:
        raise ctx.error("spec.cohortName", "unknown field (v1beta1 uses spec.cohort)")
    if version == "v1beta2" and spec.cohort is not None:
        raise ctx.error("spec.cohort", "unknown field (v1beta2 uses spec.cohortName)")
    afs = admission_scope(ctx, spec.admission_scope)
    cohort = spec.cohort or spec.cohort_name or ""
    if cohort:
        _check_name(ctx, cohort, "spec.cohort" if spec.cohort else "spec.cohortName")
    groups = _resource_groups(ctx, spec.resource_groups, has_parent=bool(cohort), owner="cohort")
    selector = o.LabelSelector(matches_nothing=True)
    if spec.namespace_selector is not None:
        selector = selector_from_api(ctx, spec.namespace_selector, "spec.namespaceSelector")
    preemption = o.PreemptionPolicy()
    if spec.preemption is not None:
        p = spec.preemption
        bwc = p.borrow_within_cohort or api.BorrowWithinCohort()
        preemption = o.PreemptionPolicy(
            within_cluster_queue=_enum(
                ctx, o.WithinClusterQueue, p.within_cluster_queue, o.WithinClusterQueue.NEVER,
                "spec.preemption.withinClusterQueue",
            ),
            reclaim_within_cohort=_enum(
                ctx, o.ReclaimWithinCohort, p.reclaim_within_cohort, o.ReclaimWithinCohort.NEVER,
                "spec.preemption.reclaimWithinCohort",
            ),
            borrow_within_cohort=_enum(
                ctx, o.BorrowWithinCohortPolicy, bwc.policy, o.BorrowWithinCohortPolicy.NEVER,
                "spec.preemption.borrowWithinCohort.policy",
            ),
            borrow_max_priority_threshold=bwc.max_priority_threshold,
        )
        if bwc.max_priority_threshold is not None and not -(2**31) <= bwc.max_priority_threshold < 2**31:
            raise ctx.error(
                "spec.preemption.borrowWithinCohort.maxPriorityThreshold",
                f"must fit in a 32-bit integer, got {bwc.max_priority_threshold}",
            )
        if (
            preemption.reclaim_within_cohort == o.ReclaimWithinCohort.NEVER
            and preemption.borrow_within_cohort != o.BorrowWithinCohortPolicy.NEVER
        ):
            raise ctx.error(
                "spec.preemption",
                "reclaimWithinCohort=Never and borrowWithinCohort.policy!=Never: borrowWithinCohort "
                "requires reclaimWithinCohort to be enabled",
            )
    preemption = _reclaim_within(ctx, body, preemption)
    fungibility = _fungibility(ctx, spec.flavor_fungibility, version)
    if version == "v1beta2" and spec.admission_checks is not None:
        raise ctx.error("spec.admissionChecks", "unknown field (v1beta2 uses spec.admissionChecksStrategy)")
    if spec.admission_checks and spec.admission_checks_strategy:
        raise ctx.error(
            "spec.admissionChecksStrategy", "admissionChecks and admissionChecksStrategy are mutually exclusive"
        )
    checks = list(spec.admission_checks or [])
    on_flavors: list[tuple[str, tuple[str, ...]]] = []
    if spec.admission_checks_strategy and spec.admission_checks_strategy.admission_checks:
        checks = [r.name for r in spec.admission_checks_strategy.admission_checks]
        on_flavors = [(r.name, tuple(r.on_flavors)) for r in spec.admission_checks_strategy.admission_checks
                      if r.on_flavors]
    return o.ClusterQueue(
        name=ctx.name,
        cohort=cohort,
        resource_groups=groups,
        namespace_selector=selector,
        queueing_strategy=_enum(
            ctx, o.QueueingStrategy, spec.queueing_strategy, o.QueueingStrategy.BEST_EFFORT_FIFO,
            "spec.queueingStrategy",
        ),
        preemption=preemption,
        flavor_fungibility=fungibility,
        stop_policy=_enum(ctx, o.StopPolicy, spec.stop_policy, o.StopPolicy.NONE, "spec.stopPolicy"),
        admission_checks=tuple(checks),
        fair_sharing_weight=_weight(ctx, spec.fair_sharing, "spec.fairSharing"),
        admission_check_flavors=tuple(on_flavors),
        admission_fair_sharing=afs,
    )


def _reclaim_within(ctx: _Ctx, body: Mapping[str, Any], preemption: o.PreemptionPolicy) -> o.PreemptionPolicy:
    """kueuelog's annotation ``kueuelog.io/reclaim-within: NominalQuota`` (see events/elasticquota.py)."""
    meta = body.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    value = annotations.get(RECLAIM_WITHIN_ANNOTATION) if isinstance(annotations, dict) else None
    if value is None:
        return preemption
    field = f"metadata.annotations.{RECLAIM_WITHIN_ANNOTATION}"
    if value != "NominalQuota":
        raise ctx.error(field, f"unsupported value {str(value)[:100]!r}: supported values: 'NominalQuota'")
    if preemption.reclaim_within_cohort == o.ReclaimWithinCohort.NEVER:
        raise ctx.error(field, "needs spec.preemption.reclaimWithinCohort other than Never")
    if preemption.borrow_within_cohort != o.BorrowWithinCohortPolicy.NEVER:
        raise ctx.error(field, "cannot be combined with spec.preemption.borrowWithinCohort (which preempts while "
                               "borrowing, beyond the nominal quota)")
    return msgspec.structs.replace(preemption, reclaim_within_nominal=True)


def _cohort(ctx: _Ctx, body: Mapping[str, Any], version: str) -> o.Cohort:
    spec = _spec(ctx, body, api.CohortSpec)
    # v1alpha1 names the parent `parent`, v1beta2 `parentName`; v1beta1 has had both over Kueue releases.
    if version == "v1alpha1" and spec.parent_name is not None:
        raise ctx.error("spec.parentName", "unknown field (v1alpha1 uses spec.parent)")
    if version == "v1beta2" and spec.parent is not None:
        raise ctx.error("spec.parent", "unknown field (v1beta2 uses spec.parentName)")
    if spec.parent and spec.parent_name and spec.parent != spec.parent_name:
        raise ctx.error(
            "spec.parentName", f"{spec.parent_name!r} conflicts with spec.parent {spec.parent!r}: set only one"
        )
    parent = spec.parent_name or spec.parent or ""
    field = "spec.parentName" if spec.parent_name else "spec.parent"
    if parent:
        _check_name(ctx, parent, field)
        if parent == ctx.name:
            raise ctx.error(field, "a Cohort cannot be its own parent")
    groups = _resource_groups(ctx, spec.resource_groups, has_parent=bool(parent), owner="parent", is_cohort=True)
    return o.Cohort(
        name=ctx.name, parent=parent, resource_groups=groups,
        fair_sharing_weight=_weight(ctx, spec.fair_sharing, "spec.fairSharing"),
    )


_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def _flavor_tolerations(ctx: _Ctx, tolerations: list[api.Toleration]) -> tuple[o.Toleration, ...]:
    """ResourceFlavor tolerations, with the CEL rules of Kueue's ResourceFlavor CRD."""
    if len(tolerations) > MAX_FLAVOR_TOLERATIONS:
        raise ctx.error("spec.tolerations", f"must have at most {MAX_FLAVOR_TOLERATIONS} items")
    out: list[o.Toleration] = []
    for i, t in enumerate(tolerations):
        path = f"spec.tolerations[{i}]"
        operator = t.operator or "Equal"
        if operator not in ("Equal", "Exists"):
            raise ctx.error(f"{path}.operator",
                            f"unsupported value {operator!r}: supported values: 'Equal' (default), 'Exists'")
        if not t.key and operator != "Exists":
            raise ctx.error(f"{path}.operator",
                            "operator must be Exists when 'key' is empty, which means 'match all values and all keys'")
        if operator == "Exists" and t.value:
            raise ctx.error(f"{path}.value", "a value must be empty when 'operator' is 'Exists'")
        if t.effect and t.effect not in _TAINT_EFFECTS:
            raise ctx.error(f"{path}.effect",
                            f"unsupported value {t.effect!r}: supported values: 'NoSchedule', 'PreferNoSchedule', "
                            "'NoExecute'")
        if t.toleration_seconds is not None and t.effect != "NoExecute":
            raise ctx.error(f"{path}.tolerationSeconds", "effect must be 'NoExecute' when 'tolerationSeconds' is set")
        out.append(o.Toleration(key=t.key or "", operator=operator, value=t.value or "", effect=t.effect or ""))
    return tuple(out)


def _resource_flavor(ctx: _Ctx, body: Mapping[str, Any]) -> o.ResourceFlavor:
    spec = _spec(ctx, body, api.ResourceFlavorSpec)
    if len(spec.node_taints or []) > MAX_FLAVOR_TAINTS:
        raise ctx.error("spec.nodeTaints", f"must have at most {MAX_FLAVOR_TAINTS} items")
    taints: list[o.Taint] = []
    for i, t in enumerate(spec.node_taints or []):
        if t.effect not in _TAINT_EFFECTS:
            raise ctx.error(
                f"spec.nodeTaints[{i}].effect",
                f"unsupported value {t.effect!r}: supported values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'",
            )
        taints.append(o.Taint(key=t.key, value=t.value or "", effect=t.effect))
    if len(spec.node_labels or {}) > 8:
        raise ctx.error("spec.nodeLabels", "must have at most 8 items")
    if spec.topology_name is not None and not spec.node_labels:
        raise ctx.error("spec.nodeLabels", "at least one nodeLabel is required when topology is set")
    return o.ResourceFlavor(
        name=ctx.name,
        node_labels=_sorted_pairs(spec.node_labels),
        node_taints=tuple(taints),
        tolerations=_flavor_tolerations(ctx, spec.tolerations or []),
    )


def _local_queue(ctx: _Ctx, body: Mapping[str, Any], namespace: str) -> o.LocalQueue:
    spec = _spec(ctx, body, api.LocalQueueSpec)
    cq = _check_name(ctx, spec.cluster_queue, "spec.clusterQueue")
    return o.LocalQueue(
        namespace=namespace, name=ctx.name, cluster_queue=cq,
        stop_policy=_enum(ctx, o.StopPolicy, spec.stop_policy, o.StopPolicy.NONE, "spec.stopPolicy"),
        fair_sharing_weight=_weight(ctx, spec.fair_sharing, "spec.fairSharing"),
        afs_consumed=consumed_resources(ctx, body),
    )


def _int_field(ctx: _Ctx, body: Mapping[str, Any], key: str, *, required: bool) -> int | None:
    value = body.get(key)
    if value is None:
        if required:
            raise ctx.error(key, "required field is missing")
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ctx.error(key, f"expected an integer, got {value!r}")
    if not -(2**31) <= value < 2**31:
        raise ctx.error(key, f"must fit in a 32-bit integer, got {value}")
    return value


def _admission(ctx: _Ctx, status: api.WorkloadStatus | None, pod_sets: tuple[o.PodSet, ...]) -> o.Admission | None:
    """A Workload that arrives holding quota (status.admission + QuotaReserved=True) counts as usage."""
    if status is None or status.admission is None:
        return None
    reserved = any(c.type == ConditionType.QUOTA_RESERVED and c.status == ConditionStatus.TRUE
                   for c in status.conditions or [])
    if not reserved:
        return None
    adm = status.admission
    _check_name(ctx, adm.cluster_queue, "status.admission.clusterQueue")
    by_name = {ps.name: ps for ps in pod_sets}
    out: list[o.PodSetAssignment] = []
    for i, psa in enumerate(adm.pod_set_assignments):
        path = f"status.admission.podSetAssignments[{i}]"
        ps = by_name.get(psa.name)
        if ps is None:
            raise ctx.error(f"{path}.name", f"no podSet named {psa.name!r} in spec.podSets")
        count = psa.count if psa.count is not None else ps.count
        if psa.resource_usage:
            usage = tuple(
                sorted((r, ctx.amount(r, v, f"{path}.resourceUsage.{r}")) for r, v in psa.resource_usage.items())
            )
        else:
            usage = tuple((r, v * count) for r, v in ps.requests)
        out.append(
            o.PodSetAssignment(name=psa.name, flavors=_sorted_pairs(psa.flavors), resource_usage=usage, count=count)
        )
    return o.Admission(cluster_queue=adm.cluster_queue, pod_set_assignments=tuple(out))


def _reserved_at(ctx: _Ctx, status: api.WorkloadStatus | None) -> int | None:
    """When an arriving Workload's quota was reserved: candidates for preemption are ordered by it."""
    for i, c in enumerate((status.conditions or []) if status is not None else []):
        if c.type == ConditionType.QUOTA_RESERVED and c.status == ConditionStatus.TRUE and c.last_transition_time:
            try:
                return parse_time(c.last_transition_time)
            except ValueError:
                raise ctx.error(f"status.conditions[{i}].lastTransitionTime",
                                f"invalid RFC 3339 time {c.last_transition_time!r}") from None
    return None


def _eviction(ctx: _Ctx, status: api.WorkloadStatus | None) -> o.Eviction | None:
    """An arriving Workload that holds quota with ``Evicted=True`` is being evicted: Kueue orders it
    first among preemption candidates and counts it as a preemption in progress."""
    for i, c in enumerate((status.conditions or []) if status is not None else []):
        if c.type == ConditionType.EVICTED and c.status == ConditionStatus.TRUE:
            at = None
            if c.last_transition_time:
                try:
                    at = parse_time(c.last_transition_time)
                except ValueError:
                    raise ctx.error(f"status.conditions[{i}].lastTransitionTime",
                                    f"invalid RFC 3339 time {c.last_transition_time!r}") from None
            return o.Eviction(reason=c.reason or "", message=c.message or "", time=at)
    return None


def _priority_ref(ctx: _Ctx, spec: api.WorkloadSpec, version: str) -> o.PriorityRef | None:
    """Where the priority comes from: v1beta1 ``priorityClassName`` + ``priorityClassSource``,
    v1beta2 ``priorityClassRef`` {group, kind, name}."""
    if version == "v1beta1" and spec.priority_class_ref is not None:
        raise ctx.error("spec.priorityClassRef", "unknown field (v1beta1 uses spec.priorityClassName)")
    if version == "v1beta2":
        for value, field in ((spec.priority_class_name, "priorityClassName"),
                             (spec.priority_class_source, "priorityClassSource")):
            if value is not None:
                raise ctx.error(f"spec.{field}", "unknown field (v1beta2 uses spec.priorityClassRef)")
    if spec.priority_class_ref is not None:
        ref = spec.priority_class_ref
        kinds = {KUEUE_GROUP: "WorkloadPriorityClass", "scheduling.k8s.io": "PriorityClass"}
        if ref.group not in kinds:
            raise ctx.error("spec.priorityClassRef.group", f"unsupported value {ref.group!r}: supported values: "
                            f"{', '.join(repr(g) for g in kinds)}")
        if ref.kind != kinds[ref.group]:
            raise ctx.error("spec.priorityClassRef.kind",
                            f"only the {kinds[ref.group]} kind is allowed for the {ref.group} group, got {ref.kind!r}")
        _check_name(ctx, ref.name, "spec.priorityClassRef.name")
        source = WORKLOAD_PRIORITY_CLASS_SOURCE if ref.group == KUEUE_GROUP else POD_PRIORITY_CLASS_SOURCE
        return o.PriorityRef(source=source, name=ref.name)
    if spec.priority_class_name:
        source = spec.priority_class_source or POD_PRIORITY_CLASS_SOURCE
        if source not in (WORKLOAD_PRIORITY_CLASS_SOURCE, POD_PRIORITY_CLASS_SOURCE):
            raise ctx.error("spec.priorityClassSource", f"unsupported value {source!r}")
        return o.PriorityRef(source=source, name=spec.priority_class_name)
    return None


def _workload_pod_sets(ctx: _Ctx, spec: api.WorkloadSpec) -> tuple[o.PodSet, ...]:
    """spec.podSets: 1 to 8, unique names, int32 counts, at most one with minCount."""
    if not spec.pod_sets:
        raise ctx.error("spec.podSets", "must have at least 1 item")
    if len(spec.pod_sets) > MAX_POD_SETS:
        raise ctx.error("spec.podSets", f"must have at most {MAX_POD_SETS} items")
    pod_sets: list[o.PodSet] = []
    names: set[str] = set()
    min_counts = 0
    for i, ps in enumerate(spec.pod_sets):
        path = f"spec.podSets[{i}]"
        _check_name(ctx, ps.name, f"{path}.name", label=True)
        if ps.name in names:
            raise ctx.error(f"{path}.name", f"duplicate value {ps.name!r}")
        names.add(ps.name)
        try:
            v.int32(ps.count, f"{path}.count", minimum=0)
        except v.Invalid as e:
            raise ctx.error(e.field, e.message) from None
        if ps.min_count is not None:
            min_counts += 1
            if ps.min_count < 1 or ps.min_count > ps.count:
                raise ctx.error(f"{path}.minCount", f"must be between 1 and count ({ps.count}), got {ps.min_count}")
        try:
            pod_sets.append(
                pod_set_from_template(ctx, ps.name, ps.count, ps.min_count, ps.template, f"{path}.template")
            )
        except ObjectError as e:
            raise ctx.error(e.field, e.message) from None
    if min_counts > 1:
        raise ctx.error("spec.podSets", "at most one podSet can use minCount (partial admission)")
    return tuple(pod_sets)


def _workload(ctx: _Ctx, body: Mapping[str, Any], meta: api.ObjectMeta, namespace: str, version: str) -> o.Workload:
    spec = _spec(ctx, body, api.WorkloadSpec)
    pod_sets_t = _workload_pod_sets(ctx, spec)
    if spec.maximum_execution_time_seconds is not None:
        try:
            v.int32(spec.maximum_execution_time_seconds, "spec.maximumExecutionTimeSeconds", minimum=1)
        except v.Invalid as e:
            raise ctx.error(e.field, e.message) from None
    queue = spec.queue_name or ""
    if queue:
        _check_name(ctx, queue, "spec.queueName")
    status = None
    if body.get("status") is not None:
        status = ctx.convert(body["status"], api.WorkloadStatus, "status")
    priority_ref = _priority_ref(ctx, spec, version)
    owner = None
    for ref in meta.owner_references or []:
        if ref.controller or owner is None:
            owner = o.OwnerReference(api_version=ref.api_version, kind=ref.kind, name=ref.name, uid=ref.uid)
    admission = _admission(ctx, status, pod_sets_t)
    return o.Workload(
        namespace=namespace,
        name=ctx.name,
        uid=meta.uid or _uid(namespace, ctx.name),
        queue_name=queue,
        pod_sets=pod_sets_t,
        creation_time=_creation(ctx, meta),
        priority=spec.priority,
        priority_ref=priority_ref,
        owner=owner,
        active=spec.active is not False,
        maximum_execution_time_seconds=spec.maximum_execution_time_seconds,
        admission=admission,
        reserved_at=_reserved_at(ctx, status),
        eviction=_eviction(ctx, status) if admission is not None else None,
        labels=_sorted_pairs(meta.labels),
        annotations=_sorted_pairs(meta.annotations),
        admission_checks=checks_manifest.check_states(ctx, status.admission_checks if status else None, parse_time),
    )


def _creation(ctx: _Ctx, meta: api.ObjectMeta) -> int | None:
    if meta.creation_timestamp is None:
        return None
    try:
        return parse_time(meta.creation_timestamp)
    except ValueError:
        raise ctx.error(
            "metadata.creationTimestamp", f"invalid RFC 3339 time {meta.creation_timestamp!r}"
        ) from None


def _uid(namespace: str, name: str) -> str:
    """A stable stand-in uid for objects written without one (manifests usually are)."""
    return hashlib.sha1(f"{namespace}/{name}".encode(), usedforsecurity=False).hexdigest()[:32]


def normalize(doc: Document) -> o.AnyObject | None:
    """One manifest to one internal object; ``None`` for objects we deliberately ignore
    (a Job without the queue-name label is not Kueue's to manage)."""
    kind, api_version, meta = _meta(doc)
    body: Mapping[str, Any] = doc.body
    group, _, version = api_version.rpartition("/")
    name_ctx = _Ctx(doc, kind, meta.name or "")
    if kind == "Configuration":
        rest = {k: val for k, val in body.items() if k not in ("apiVersion", "kind", "metadata")}
        return read_configuration(name_ctx, version, rest)
    # A Namespace's name is an RFC 1123 label (no dots, at most 63 characters); most names are subdomains.
    name = _check_name(name_ctx, meta.name, "metadata.name", label=(kind == "Namespace" and api_version == "v1"))
    namespaced = (kind in ("LocalQueue", "Workload", "Job", "Queue", "ConfigMap", dra.KIND)
                  or (api_version, kind) in jobkinds.BY_KEY
                  or (api_version, kind) == (trainjob.API_VERSION, trainjob.NAMESPACED_RUNTIME))
    namespace = meta.namespace or (t9k.NAMESPACE if kind == "Queue" else "default")
    if namespaced:
        _check_name(name_ctx, namespace, "metadata.namespace", label=True)
    ctx = _Ctx(doc, kind, f"{namespace}/{name}" if namespaced else name)
    ctx.name = name
    ctx_display = _Ctx(doc, kind, f"{namespace}/{name}" if namespaced else name)
    try:
        v.labels(_sorted_pairs(meta.labels), "metadata.labels")
        obj = _dispatch(ctx, kind, group, version, body, meta, namespace)
        if obj is not None:
            v.validate_object(obj)  # the limits a record from the log is held to, too
        return obj
    except ManifestError as e:
        # Re-locate with the display name (namespace/name) while keeping field and message.
        raise ctx_display.error(e.field, e.message) from None
    except v.Invalid as e:
        raise ctx_display.error(e.field, e.message) from None


def _check_kinds(ctx: _Ctx, kind: str, body: Mapping[str, Any], meta: api.ObjectMeta) -> o.AnyObject:
    """AdmissionCheck and the kinds its controllers read (ProvisioningRequestConfig, MultiKueue's)."""
    if kind == "AdmissionCheck":
        ac_spec = _spec(ctx, body, api.AdmissionCheckSpec)
        if ac_spec.controller_name == multikueue_manifest.MULTIKUEUE_CONTROLLER:
            p = ac_spec.parameters or api.AdmissionCheckParametersReference()
            multikueue_manifest.check_parameters(ctx, p.kind, p.api_group, p.name)
        return checks_manifest.admission_check(ctx, ac_spec, body)
    if kind == "MultiKueueConfig":
        return multikueue_manifest.multikueue_config(ctx, body, meta.annotations or {})
    if kind == "MultiKueueCluster":
        return multikueue_manifest.multikueue_cluster(ctx, body)
    return checks_manifest.provisioning_config(ctx, _spec(ctx, body, api.ProvisioningRequestConfigSpec))


def _dispatch(
    ctx: _Ctx, kind: str, group: str, version: str, body: Mapping[str, Any], meta: api.ObjectMeta, namespace: str
) -> o.AnyObject | None:
    """The parser of a kind :data:`SUPPORTED_KINDS` lists (``_meta`` has refused the others)."""
    api_version = f"{group}/{version}" if group else version
    if group == KUEUE_GROUP:
        if kind == "ResourceFlavor":
            return _resource_flavor(ctx, body)
        if kind == "ClusterQueue":
            return _cluster_queue(ctx, body, version)
        if kind == "Cohort":
            return _cohort(ctx, body, version)
        if kind == "LocalQueue":
            return _local_queue(ctx, body, namespace)
        if kind == "Workload":
            return _workload(ctx, body, meta, namespace, version)
        if kind == "WorkloadPriorityClass":
            value = _int_field(ctx, body, "value", required=True)
            assert value is not None
            return o.WorkloadPriorityClass(name=ctx.name, value=value)
        return _check_kinds(ctx, kind, body, meta)
    if api_version == "v1" and kind == "Namespace":
        labels = dict(meta.labels or {})
        labels["kubernetes.io/metadata.name"] = ctx.name  # the API server sets it on every namespace
        return o.Namespace(name=ctx.name, labels=_sorted_pairs(labels))
    if api_version == "batch/v1" and kind == "Job":
        return _job(ctx, body, meta, namespace)
    if group == dra.GROUP and kind == dra.KIND:
        dra.read_template(ctx, version, body, namespace, ctx.name)  # checked; read by load() (events/dra.py)
        return None
    if api_version == "scheduling.k8s.io/v1" and kind == "PriorityClass":
        value = _int_field(ctx, body, "value", required=True)
        assert value is not None
        global_default = body.get("globalDefault")
        if global_default is not None and not isinstance(global_default, bool):
            raise ctx.error("globalDefault", f"expected a boolean, got {global_default!r}")
        return o.PriorityClass(name=ctx.name, value=value, global_default=bool(global_default))
    return _front_end_or_job_kind(ctx, api_version, kind, body, meta, namespace)


def _front_end_or_job_kind(
    ctx: _Ctx, api_version: str, kind: str, body: Mapping[str, Any], meta: api.ObjectMeta, namespace: str
) -> o.AnyObject | None:
    """A T9k Queue, or a workload kind of :mod:`events.jobkinds` (JobSet, PyTorchJob, RayJob, ...)."""
    if (api_version, kind) in t9k.KINDS:
        return t9k.normalize(ctx, kind, body, namespace)
    if api_version == trainjob.API_VERSION and kind in trainjob.RUNTIME_KINDS:
        trainjob.check_runtime(ctx, body)  # checked; its TrainJobs read it (load() embeds it in them)
        return None
    job_kind = jobkinds.kind_of(api_version, kind)
    if job_kind is not None:
        try:
            return jobkinds.to_workload(ctx, job_kind, meta, body, namespace, _creation(ctx, meta))
        except ObjectError as e:
            raise ctx.error(e.field, e.message) from None
    refusal = _unsupported(kind, api_version) or ("kind", f"unsupported kind {kind} (apiVersion {api_version})")
    raise ctx.error(*refusal)


def _job(ctx: _Ctx, body: Mapping[str, Any], meta: api.ObjectMeta, namespace: str) -> o.Workload | None:
    """A Job queued by Kueue's label, or on a T9k Queue (``events.t9k``); ``None`` for neither."""
    spec = _spec(ctx, body, api.JobSpec)
    try:
        created = _creation(ctx, meta)
        return (job_to_workload(ctx, meta, spec, namespace, created)
                or t9k.job_workload(ctx, meta, spec, namespace, created))
    except ObjectError as e:
        raise ctx.error(e.field, e.message) from None


_GENERATED_NAME_KINDS = ({("batch/v1", "Job")} | {(f"{KUEUE_GROUP}/{v}", "Workload") for v in KUEUE_VERSIONS}
                         | {k.key for k in jobkinds.OTHER_KINDS} | {("v1", "Pod")})


class _Names:
    """The names given so far, per kind and namespace, and how many documents used each
    generateName: what :mod:`events.generatename` needs to name the next one."""

    def __init__(self) -> None:
        self.taken: dict[tuple[str, str], set[str]] = {}
        self.ordinals: dict[tuple[str, str, str], int] = {}

    def name(self, doc: Document) -> Document:
        """``doc`` itself, or (a Job or Workload with generateName and no name) a copy with its name."""
        body = doc.body
        meta = body.get("metadata") if isinstance(body, dict) else None
        if not isinstance(meta, dict):
            return doc
        kind, api_version = body.get("kind"), body.get("apiVersion")
        namespace = meta.get("namespace") or "default"
        if not isinstance(kind, str) or not isinstance(namespace, str):
            return doc
        taken = self.taken.setdefault((kind, namespace), set())
        name, prefix = meta.get("name"), meta.get("generateName")
        if name or not prefix or not isinstance(prefix, str) or (api_version, kind) not in _GENERATED_NAME_KINDS:
            if isinstance(name, str):
                taken.add(name)
            return doc
        key = (kind, namespace, prefix)
        ordinal = self.ordinals.get(key, 0)
        self.ordinals[key] = ordinal + 1
        # The API server checks the prefix itself, a trailing '-' allowed (ValidateObjectMeta's maskTrailingDash).
        masked = prefix[:-1] + "a" if prefix.endswith("-") else prefix
        if len(masked) > 253 or not _DNS_SUBDOMAIN.fullmatch(masked):
            obj = f"{kind} {namespace}/{prefix}" if _PLAIN.fullmatch(prefix) else kind
            raise ManifestError(doc.file, doc.index, obj, "metadata.generateName",
                                f"invalid value {prefix[:100]!r}: must be the prefix of a lowercase RFC 1123 "
                                "subdomain (at most 253 characters, e.g. 'sample-job-')")
        name = free_name(prefix, content_digest(body), ordinal, taken)
        taken.add(name)
        return Document(doc.file, doc.index, {**body, "metadata": {**meta, "name": name}})


def load(
    files: Mapping[str, str], expand: Callable[[list[Document]], list[Document]] | None = None
) -> list[tuple[Document, o.AnyObject]]:
    """Every document of every file, in order, normalised; the first error stops the load.

    A Job or Workload with ``metadata.generateName`` and no name is named here
    (:mod:`events.generatename`), the same way for the same input. ``expand``, if given, sees
    every document first and may replace some (front-end kinds translated to Kueue's)."""
    out: list[tuple[Document, o.AnyObject]] = []
    parents: dict[str, str] = {}  # Cohort -> parent, as applied so far: the one rule across objects
    names = _Names()
    docs: Iterable[Document] = (d for file, text in files.items() for d in read_documents(file, text))
    if expand is not None:
        docs = expand(list(docs))
    named = _with_runtimes(list(map(names.name, docs)))
    templates = _claim_templates(named)
    for doc in named:
        obj = normalize(doc)
        if obj is None:
            continue
        if isinstance(obj, o.Workload):
            obj = dra.resolve(obj, lambda ns, name: templates.get((ns, name)))
        if isinstance(obj, o.Cohort):
            problem = v.cohort_problem(parents, obj)
            if problem is not None:
                raise ManifestError(doc.file, doc.index, f"Cohort {obj.name}", problem.field, problem.message)
            parents[obj.name] = obj.parent
        out.append((doc, obj))
    return prebuilt.adopt(out, _prebuilt_wanted, _prebuilt_error)


def _prebuilt_wanted(doc: Document) -> tuple[str, str, str] | None:
    """(name, field, shown) when ``doc`` is a job naming a prebuilt Workload (``events.jobkinds.prebuilt``)."""
    body = doc.body
    meta = body.get("metadata") if isinstance(body, Mapping) else None
    if not isinstance(meta, Mapping) or (body.get("apiVersion"), body.get("kind")) not in jobkinds.BY_KEY:
        return None
    labels, annotations = meta.get("labels"), meta.get("annotations")
    labels = labels if isinstance(labels, Mapping) else {}
    name = prebuilt.prebuilt_name(labels, annotations if isinstance(annotations, Mapping) else {})
    return (name, prebuilt.field_of(labels), f"{body.get('kind')} {meta.get('name')}") if name else None


def _prebuilt_error(doc: Document, shown: str, field: str, message: str) -> Exception:
    return ManifestError(doc.file, doc.index, shown, field, message)


def _with_runtimes(docs: list[Document]) -> list[Document]:
    """Every TrainJob with the runtime it names embedded (``events.jobkinds.trainjob``), its runtime
    read from the input as a whole (a later one of the same name wins), as Kueue reads it when it
    handles the TrainJob, after the files are applied. A runtime is checked where it is written."""
    runtimes: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for doc in docs:
        body = doc.body
        if (isinstance(body, dict) and body.get("apiVersion") == trainjob.API_VERSION
                and body.get("kind") in trainjob.RUNTIME_KINDS):
            normalize(doc)
            kind, _, meta = _meta(doc)
            scope = "" if kind == trainjob.CLUSTER_RUNTIME else (meta.namespace or "default")
            runtimes[(kind, scope, meta.name or "")] = body.get("spec") or {}
    if not any(isinstance(d.body, dict) and (d.body.get("apiVersion"), d.body.get("kind")) == trainjob.TRAINJOB.key
               for d in docs):
        return docs
    return [Document(d.file, d.index, trainjob.embed(d.body, lambda k, ns, n: runtimes.get((k, ns, n))))
            if isinstance(d.body, dict) and (d.body.get("apiVersion"), d.body.get("kind")) == trainjob.TRAINJOB.key
            else d for d in docs]


def _claim_templates(docs: list[Document]) -> dict[tuple[str, str], dra.ClaimTemplate]:
    """Every ResourceClaimTemplate of the input, by namespace and name (a later one of the same
    name wins): a claim is resolved against the input as a whole, as Kueue reads the template
    when it handles the workload, after the files are applied."""
    out: dict[tuple[str, str], dra.ClaimTemplate] = {}
    for doc in docs:
        if dra.is_template(doc.body):
            kind, api_version, meta = _meta(doc)
            name = _check_name(_Ctx(doc, kind, meta.name or ""), meta.name, "metadata.name")
            namespace = meta.namespace or "default"
            ctx = _Ctx(doc, kind, f"{namespace}/{name}")
            _check_name(ctx, namespace, "metadata.namespace", label=True)
            t = dra.read_template(ctx, api_version.rpartition("/")[2], doc.body, namespace, name)
            out[(namespace, name)] = t
    return out


def decode_file(file: str, data: bytes) -> str:
    """A manifest file's bytes (read with a cap of one byte over ``MAX_MANIFEST_BYTES``) as text."""
    if len(data) > v.MAX_MANIFEST_BYTES:
        raise ManifestError(file, 0, "", "", f"larger than {v.MAX_MANIFEST_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ManifestError(file, 0, "", "", f"not UTF-8 text (byte {e.start}): {e.reason}") from None


def iter_pairs(d: Mapping[str, T]) -> Iterator[tuple[str, T]]:
    return iter(sorted(d.items()))

"""The limits every door applies: one implementation for manifests, records and the simulated cluster.

Three doors let objects in: a manifest (``simulate``, ``demo``, the watcher's
translation, all through ``events.manifests``), a cluster event read from the
log (the scheduler folds it), and an annotation the simulated cluster reads.
All of them apply the rules here, so that no door accepts what another refuses:
an object that passed a manifest check passes :func:`validate_object`, and a
record written by anyone else is held to the same limits before it is folded.

The limits are Kubernetes' and Kueue's where they define one (int32 counts and
priorities, non-negative quantities, label syntax, Go's int64-nanosecond
durations); where they do not (nesting, sizes, cohort depth, quantity length)
they are ours, chosen far above anything a real manifest needs and low enough
that no input can exhaust the stack or the memory. Each is a named constant,
and the README's table lists them.

Every refusal is an :class:`Invalid` naming the field the way a Kueue manifest
names it (``spec.podSets[0].count``), so the scheduler's dead letters and
``simulate``'s errors read alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Final

from events import objects as o
from events.messages import ClusterEvent, ObjectApplied

INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1
"""Kueue keeps amounts in int64 (milli-units for cpu): a larger amount is refused, not saturated."""
MAX_QUANTITY_CHARS: Final = 64
"""A quantity's text; ``9223372036854775807`` is 19 digits, so real quantities are far shorter."""
MAX_POD_SETS: Final = 8  # Kueue's Workload CRD (spec.podSets maxItems)
MAX_COHORT_DEPTH: Final = 100
"""Cohorts from a tree's root to its deepest Cohort. Kueue sets no bound; ours keeps every walk of
the quota tree far from Python's recursion limit."""
MAX_NESTING: Final = 64
"""Nesting of a JSON record or a YAML document (objects and arrays). Our deepest object (a Job's
required node affinity values) is about 12 levels down."""
MAX_RECORD_BYTES: Final = 1 << 20
# A cohort tree's state handed over to another shard (events.shardmap) travels as one record.
MAX_HAND_OVER_BYTES: Final = 64 << 20
"""A cluster-event or decision record: Kafka's default ``max.request.size`` (1 MiB) of a producer."""
MAX_MANIFEST_BYTES: Final = 32 << 20
"""One manifest file. The API server takes at most 3 MiB per object; a file holds many."""
MAX_YAML_NODES: Final = 1 << 20
"""Nodes of one YAML document once its aliases (``*anchor``) are expanded: each alias stands for a
whole subtree, so a few levels of them multiply into a document too large to hold (the "billion
laughs"). Without aliases a document within ``MAX_MANIFEST_BYTES`` stays far below it."""
MAX_DURATION_CHARS: Final = 64
MAX_DURATION_NS: Final = INT64_MAX  # Go's time.Duration: int64 nanoseconds, about 292 years
MAX_DURATION_MS: Final = MAX_DURATION_NS // 1_000_000
MIN_TIME_MS: Final = -62_135_596_800_000  # 0001-01-01T00:00:00Z, the first RFC 3339 time
MAX_TIME_MS: Final = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, the last (and Python's datetime's)
MAX_LABEL_NAME: Final = 63
MAX_LABEL_PREFIX: Final = 253
MAX_LABEL_VALUE: Final = 63

_DNS_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME: Final = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DURATION_PART: Final = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")  # Go takes both mu signs
_NS_PER: Final = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000,
                  "s": 1_000_000_000, "m": 60_000_000_000, "h": 3_600_000_000_000}
_DIGITS: Final = re.compile(r"[0-9]+")
_SIGNED_DIGITS: Final = re.compile(r"[+-]?[0-9]+")  # what Go's strconv.Atoi accepts
_JSON_SPECIAL: Final = re.compile(rb'[\\"\[\]{}]')
_OPEN, _CLOSE, _QUOTE, _BACKSLASH = frozenset(b"[{"), frozenset(b"]}"), ord('"'), ord("\\")


class Invalid(ValueError):
    """A value outside the limits, with the field it is in."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field, self.message = field, message


# --- numbers -----------------------------------------------------------------------------------


def int32(value: int, field: str, *, minimum: int = INT32_MIN) -> int:
    """``value`` if it is a 32-bit integer at or above ``minimum`` (Kubernetes' int32 fields)."""
    if value < minimum:
        raise Invalid(field, f"must be greater than or equal to {minimum}, got {value}")
    if value > INT32_MAX:
        raise Invalid(field, f"must be at most {INT32_MAX} (a 32-bit integer), got {_short(value)}")
    return value


def amount(value: int, field: str) -> int:
    """``value`` if it is a non-negative amount that fits Kueue's int64."""
    if value < 0:
        raise Invalid(field, f"must be greater than or equal to 0, got {_short(value)}")
    if value > INT64_MAX:
        raise Invalid(field, f"must be at most {INT64_MAX} (Kueue's int64 amount), got {_short(value)}")
    return value


def int_text(text: str, field: str, *, minimum: int = INT32_MIN, maximum: int = INT32_MAX) -> int:
    """A decimal integer written as text (an annotation), parsed without Python's digit limit
    ever being reached: a value that cannot be in range is refused by its length first."""
    if not _SIGNED_DIGITS.fullmatch(text):
        raise Invalid(field, f"must be an integer, got {_short_text(text)!r}")
    if len(text.lstrip("+-").lstrip("0")) > len(str(max(abs(minimum), abs(maximum)))):
        raise Invalid(field, f"must be between {minimum} and {maximum}, got {_short_text(text)!r}")
    value = int(text)
    if not minimum <= value <= maximum:
        raise Invalid(field, f"must be between {minimum} and {maximum}, got {value}")
    return value


def _short(value: int) -> str:
    return str(value) if value.bit_length() < 200 else f"an integer of {value.bit_length()} bits"


def _short_text(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"


def quantity_text(text: str) -> str | None:
    """What is wrong with a quantity's length before its digits are parsed, or None."""
    if len(text) > MAX_QUANTITY_CHARS:
        return f"{_short_text(text)!r} is longer than {MAX_QUANTITY_CHARS} characters"
    return None


def quantity_blanks(value: object) -> str | None:
    """A manifest's quantity with blanks around it. Kueue's CRDs refuse it (their quantity pattern
    is anchored); the core API's JSON decoder would trim it, but a manifest is read one way here:
    refused, rather than meaning a number to one reader and an error to another."""
    if isinstance(value, str) and value != value.strip() and value.strip():
        return f"{_short_text(value)!r}: a quantity must not have leading or trailing blanks"
    return None


# --- durations ---------------------------------------------------------------------------------


def duration_ns(text: str, *, bare_ms: bool = False) -> int:
    """A Go duration (``90s``, ``1h30m``, ``1.5h``, ``250ms``) in whole nanoseconds (rounded
    down), exactly (no float) and within Go's int64; with ``bare_ms`` a plain integer is
    milliseconds (the simulated cluster's annotation). Raises :class:`Invalid` without a field."""
    if len(text) > MAX_DURATION_CHARS:
        raise Invalid("", f"invalid duration {_short_text(text)!r}: longer than {MAX_DURATION_CHARS} characters")
    if bare_ms and _DIGITS.fullmatch(text):
        total = Fraction(int(text) * 1_000_000)
    else:
        pos, total = 0, Fraction(0)
        for m in _DURATION_PART.finditer(text):
            if m.start() != pos:
                break
            total += Fraction(m.group(1)) * _NS_PER[m.group(2)]
            pos = m.end()
        if pos != len(text) or not text:
            raise Invalid("", f"invalid duration {text!r}")
    if total > MAX_DURATION_NS:
        raise Invalid("", f"invalid duration {text!r}: longer than Go's maximum duration (about 292 years)")
    return int(total)


# --- labels ------------------------------------------------------------------------------------


def label_key_problem(key: str) -> str | None:
    """Kubernetes' qualified name: an optional DNS-subdomain prefix and ``/``, then a name."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > MAX_LABEL_PREFIX or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return (f"invalid label key {_short_text(key)!r}: a prefix must be a lowercase RFC 1123 subdomain "
                f"of at most {MAX_LABEL_PREFIX} characters")
    if not name or len(name) > MAX_LABEL_NAME or not _QUALIFIED_NAME.fullmatch(name):
        return (f"invalid label key {_short_text(key)!r}: a name must be at most {MAX_LABEL_NAME} characters "
                "of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric")
    return None


def label_value_problem(value: str) -> str | None:
    if value and (len(value) > MAX_LABEL_VALUE or not _QUALIFIED_NAME.fullmatch(value)):
        return (f"invalid label value {_short_text(value)!r}: must be empty or at most {MAX_LABEL_VALUE} "
                "characters of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric")
    return None


def labels(pairs: Iterable[tuple[str, str]], field: str) -> None:
    for key, value in pairs:
        problem = label_key_problem(key) or label_value_problem(value)
        if problem:
            raise Invalid(f"{field}.{_short_text(key)}", problem)


def _selector(sel: o.LabelSelector, field: str) -> None:
    labels(sel.match_labels, f"{field}.matchLabels")
    for i, r in enumerate(sel.match_expressions):
        problem = label_key_problem(r.key)
        if problem:
            raise Invalid(f"{field}.matchExpressions[{i}].key", problem)


# --- objects -----------------------------------------------------------------------------------


def pod_set_total(count: int, requests: Iterable[tuple[str, int]], field: str) -> None:
    """A podSet's requests times its count must stay an int64 amount (what its admission uses)."""
    for resource, value in requests:
        if value * count > INT64_MAX:
            raise Invalid(field, f"count ({count}) times the {resource} request per pod ({value}) "
                                 f"exceeds {INT64_MAX} (Kueue's int64 amount)")


def _pod_sets(wl: o.Workload) -> dict[str, o.PodSet]:
    if not wl.pod_sets:
        raise Invalid("spec.podSets", "must have at least 1 item")
    if len(wl.pod_sets) > MAX_POD_SETS:
        raise Invalid("spec.podSets", f"must have at most {MAX_POD_SETS} items")
    by_name: dict[str, o.PodSet] = {}
    for i, ps in enumerate(wl.pod_sets):
        path = f"spec.podSets[{i}]"
        if ps.name in by_name:
            raise Invalid(f"{path}.name", f"duplicate value {ps.name!r}")
        by_name[ps.name] = ps
        int32(ps.count, f"{path}.count", minimum=0)
        if ps.min_count is not None and not 1 <= ps.min_count <= ps.count:
            raise Invalid(f"{path}.minCount", f"must be between 1 and count ({ps.count}), got {ps.min_count}")
        for resource, value in ps.requests:
            amount(value, f"{path}.template.spec.containers.resources.requests.{resource}")
        pod_set_total(ps.count, ps.requests, path)
        labels(ps.node_selector, f"{path}.template.spec.nodeSelector")
        for c in ps.device_claims:  # DRA claims (events/dra.py): devices per class, an int64 each
            for device_class, devices in c.devices:
                amount(devices, f"{path}.template.spec.resourceClaims[{c.index}] ({device_class})")
    return by_name


def _admission(adm: o.Admission, by_name: Mapping[str, o.PodSet]) -> None:
    """Kueue's admission rules (workload webhook): each assignment names a distinct podSet of the
    spec, and counts no more pods than that podSet has."""
    seen: dict[str, int] = {}
    for i, psa in enumerate(adm.pod_set_assignments):
        path = f"status.admission.podSetAssignments[{i}]"
        if psa.name in seen:
            raise Invalid(f"{path}.name", f"duplicate value {psa.name!r} (already podSetAssignments[{seen[psa.name]}])")
        seen[psa.name] = i
        ps = by_name.get(psa.name)
        if ps is None:
            raise Invalid(f"{path}.name", f"no podSet named {psa.name!r} in spec.podSets")
        int32(psa.count, f"{path}.count", minimum=0)
        if psa.count > ps.count:
            raise Invalid(f"{path}.count", f"must be at most the podSet's count ({ps.count}), got {psa.count}")
        for resource, value in psa.resource_usage:
            amount(value, f"{path}.resourceUsage.{resource}")


def time_ms(value: int, field: str) -> None:
    """A time every reader can print: within RFC 3339's years 1 to 9999."""
    if not MIN_TIME_MS <= value <= MAX_TIME_MS:
        raise Invalid(field, f"must be between {MIN_TIME_MS} and {MAX_TIME_MS} ms since the epoch (years 1 to "
                             f"9999), got {_short(value)}")


def _workload(wl: o.Workload) -> None:
    by_name = _pod_sets(wl)
    if wl.creation_time is not None:
        time_ms(wl.creation_time, "metadata.creationTimestamp")
    if wl.reserved_at is not None:
        time_ms(wl.reserved_at, "status.conditions.lastTransitionTime")
    if wl.priority is not None:
        int32(wl.priority, "spec.priority")
    labels(wl.labels, "metadata.labels")
    if wl.admission is not None:
        _admission(wl.admission, by_name)


def _resource_groups(groups: tuple[o.ResourceGroup, ...]) -> None:
    for gi, group in enumerate(groups):
        for fi, fq in enumerate(group.flavors):
            for qi, (_, q) in enumerate(fq.resources):
                path = f"spec.resourceGroups[{gi}].flavors[{fi}].resources[{qi}]"
                amount(q.nominal, f"{path}.nominalQuota")
                if q.borrowing_limit is not None:
                    amount(q.borrowing_limit, f"{path}.borrowingLimit")
                if q.lending_limit is not None:
                    amount(q.lending_limit, f"{path}.lendingLimit")


def validate_object(obj: o.AnyObject) -> None:
    """Raise :class:`Invalid` for an object outside the limits. Manifests already refuse all of
    this with more context; records from the log get here without that parser."""
    if isinstance(obj, o.Workload):
        _workload(obj)
    elif isinstance(obj, o.ClusterQueue):
        _resource_groups(obj.resource_groups)
        amount(obj.fair_sharing_weight, "spec.fairSharing.weight")
        _selector(obj.namespace_selector, "spec.namespaceSelector")
        if obj.preemption.borrow_max_priority_threshold is not None:
            int32(obj.preemption.borrow_max_priority_threshold,
                  "spec.preemption.borrowWithinCohort.maxPriorityThreshold")
    elif isinstance(obj, o.Cohort):
        _resource_groups(obj.resource_groups)
        amount(obj.fair_sharing_weight, "spec.fairSharing.weight")
        if obj.parent == obj.name:
            raise Invalid("spec.parentName", "a Cohort cannot be its own parent")
    elif isinstance(obj, o.WorkloadPriorityClass | o.PriorityClass):
        int32(obj.value, "value")
    elif isinstance(obj, o.Namespace):
        labels(obj.labels, "metadata.labels")
    elif isinstance(obj, o.ResourceFlavor):
        labels(obj.node_labels, "spec.nodeLabels")
    elif isinstance(obj, o.Configuration) and not 0 <= obj.wait_for_pods_ready_timeout_ms <= MAX_DURATION_MS:
        raise Invalid("waitForPodsReady.timeout", f"must be between 0 and {MAX_DURATION_MS} ms, "
                                                  f"got {_short(obj.wait_for_pods_ready_timeout_ms)}")


def describe(obj: o.AnyObject) -> str:
    """``Workload default/job-a``: an object as an error names it."""
    name = getattr(obj, "name", "")
    namespace = getattr(obj, "namespace", "")
    return f"{type(obj).__name__} {namespace + '/' if namespace else ''}{name}".strip()


# --- cohort trees ------------------------------------------------------------------------------


def cohort_depth(parents: Mapping[str, str], name: str, parent: str) -> int:
    """Levels of the deepest chain of Cohorts through ``name`` once its parent is ``parent``,
    given every other Cohort's parent; counting stops past :data:`MAX_COHORT_DEPTH` and at a
    cycle (a cycle is Kueue's to report: its ClusterQueues are inactive)."""
    up, walk, seen = 0, parent, {name}
    while walk and walk not in seen and up <= MAX_COHORT_DEPTH:
        seen.add(walk)
        up += 1
        walk = parents.get(walk, "")
    children: dict[str, list[str]] = {}
    for child, p in parents.items():
        if p and child != name:
            children.setdefault(p, []).append(child)
    down, level, visited = 0, [name], {name}
    while level and up + 1 + down <= MAX_COHORT_DEPTH:
        below = [c for n in level for c in children.get(n, ()) if c not in visited]
        visited.update(below)
        if below:
            down += 1
        level = below
    return up + 1 + down


def cohort_problem(parents: Mapping[str, str], cohort: o.Cohort) -> Invalid | None:
    if not cohort.parent:
        return None
    depth = cohort_depth(parents, cohort.name, cohort.parent)
    if depth <= MAX_COHORT_DEPTH:
        return None
    return Invalid("spec.parentName", f"the Cohort tree would be more than {MAX_COHORT_DEPTH} Cohorts deep "
                                      f"with parent {cohort.parent!r}")


def event_problem(event: ClusterEvent, cohorts: Mapping[str, o.Cohort]) -> str | None:
    """Why a cluster event from the log must not be folded (naming the object and the field),
    given the Cohorts folded so far; None when it may be. Its time must be printable (the
    actuator writes it into conditions); an applied object is held to :func:`validate_object`."""
    try:
        time_ms(event.time, "time")
    except Invalid as e:
        return f"invalid {type(event).__name__} event: {e}"
    if isinstance(event, ObjectApplied):
        return applied_problem(event.object, cohorts)
    return None


def applied_problem(obj: o.AnyObject, cohorts: Mapping[str, o.Cohort]) -> str | None:
    """Why an applied object must not be folded, given the Cohorts folded so far; None when it may be."""
    try:
        validate_object(obj)
        if isinstance(obj, o.Cohort) and obj.parent:
            problem = cohort_problem({name: c.parent for name, c in cohorts.items()}, obj)
            if problem is not None:
                raise problem
    except Invalid as e:
        return f"invalid {describe(obj)}: {e}"
    return None


# --- records -----------------------------------------------------------------------------------


def json_nesting_problem(data: bytes, limit: int = MAX_RECORD_BYTES) -> str | None:
    """Why a JSON record must not be decoded (too large, nested too deep), or None. Cheap for
    the records we write: a record with few brackets cannot be deep, and only a record with
    many is scanned, in one pass over its quotes, backslashes and brackets (so brackets inside
    strings do not count), linear in its size whatever it holds."""
    if len(data) > limit:
        return f"record of {len(data)} bytes is larger than {limit} bytes"
    if data.count(b"[") + data.count(b"{") <= MAX_NESTING:
        return None
    depth, in_string, skip_to = 0, False, -1
    for m in _JSON_SPECIAL.finditer(data):
        pos = m.start()
        if pos < skip_to:
            continue  # the character after a backslash
        c = data[pos]
        if in_string:
            if c == _BACKSLASH:
                skip_to = pos + 2
            elif c == _QUOTE:
                in_string = False
        elif c == _QUOTE:
            in_string = True
        elif c in _OPEN:
            depth += 1
            if depth > MAX_NESTING:
                return f"nested deeper than {MAX_NESTING} levels"
        elif c in _CLOSE:
            depth -= 1
    return None

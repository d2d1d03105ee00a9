"""``simulate``'s pods, pod groups and serving objects: manifests to the Workloads Kueue makes.

:func:`expand` replaces every ``v1`` Pod, ``apps/v1`` Deployment and StatefulSet and
``leaderworkerset.x-k8s.io/v1`` LeaderWorkerSet document by the Workload manifests Kueue's
integrations create for it (:mod:`events.jobkinds.pods`, :mod:`events.jobkinds.serving`), at its
place in the input; a pod group's Workload stands where its last pod completes it. Objects without
a queue-name label (or in kube-system / kueue-system) are not Kueue's and are dropped. A group
still short of pods at the end of the input is refused: Kueue would wait for the missing pods
and never admit it. The Workloads of serving objects carry ``kueuelog.io/sim-duration: never``
(unless the object sets one): the simulated cluster runs them until they are evicted.

Every Workload is checked here, so that an error names the Pod (or the serving object) and its
own field rather than the Workload made from it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from events.cluster import (
    KUEUE_GROUP,
    POD_PRIORITY_CLASS_SOURCE,
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
    SIM_DURATION_ANNOTATION,
    WORKLOAD_PRIORITY_CLASS_SOURCE,
)
from events.jobkinds import pods as p
from events.jobkinds import serving as s
from events.jobkinds.base import dotted
from events.jobkinds.naming import check_queue_name
from events.manifests import Document, ManifestError, _Names, normalize
from events.podspec import ObjectError

POD = ("v1", "Pod")
NEVER = "never"
Json = dict[str, Any]


class _Where:
    def __init__(self, doc: Document, shown: str) -> None:
        self.doc, self.shown = doc, shown

    def error(self, field: str, message: str) -> Exception:
        return ManifestError(self.doc.file, self.doc.index, self.shown, field, message)

    def amount(self, resource: str, value: object, field: str) -> int:  # pragma: no cover - unused here
        from events.quantity import QuantityError, to_amount

        try:
            return to_amount(resource, value)
        except QuantityError as e:
            raise self.error(field, str(e)) from None


def _key(doc: Document) -> tuple[str, str] | None:
    body = doc.body
    if not isinstance(body, dict):
        return None
    key = (body.get("apiVersion"), body.get("kind"))
    return key if key == POD or key in s.KINDS else None


def priority_fields(labels: Mapping[str, str], pod_spec: Mapping[str, Any]) -> Json:
    if labels.get(PRIORITY_CLASS_LABEL):
        return {"priorityClassName": labels[PRIORITY_CLASS_LABEL],
                "priorityClassSource": WORKLOAD_PRIORITY_CLASS_SOURCE}
    pcn = pod_spec.get("priorityClassName")
    if isinstance(pcn, str) and pcn:
        return {"priorityClassName": pcn, "priorityClassSource": POD_PRIORITY_CLASS_SOURCE}
    return {}


def workload_body(namespace: str, name: str, queue: str, owners: list[Json], pod_sets: list[Json], *,
              labels: Mapping[str, str], annotations: Mapping[str, str], created: object, priority: Json) -> Json:
    meta: Json = {"name": name, "namespace": namespace, "ownerReferences": owners,
                  "labels": dict(labels), "annotations": dict(annotations)}
    if created is not None:
        meta["creationTimestamp"] = created
    return {"apiVersion": f"{KUEUE_GROUP}/v1beta1", "kind": "Workload", "metadata": meta,
            "spec": {"queueName": queue, "podSets": pod_sets, **priority}}


def owner_ref(api_version: str, kind: str, name: str, uid: str, controller: bool = True) -> Json:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": controller}


def _checked(doc: Document, shown: str, paths: Sequence[str], body: Json) -> Document:
    """The Workload as a document, validated; an error is reported at the object's own field."""
    out = Document(doc.file, doc.index, body)
    try:
        normalize(out)
    except ManifestError as e:
        field = e.field
        prefix = "spec.podSets["
        if field.startswith(prefix):
            index, _, rest = field[len(prefix):].partition("].template")
            if index.isdigit() and int(index) < len(paths):
                field = (paths[int(index)] + rest).lstrip(".")
        raise ManifestError(doc.file, doc.index, shown, field, e.message) from None
    return out


def _meta(doc: Document) -> tuple[Mapping[str, Any], str, str, str]:
    body = doc.body
    meta = body.get("metadata") if isinstance(body.get("metadata"), Mapping) else {}
    name = meta.get("name")
    namespace = str(meta.get("namespace") or "default")
    kind = str(body.get("kind"))
    if not isinstance(name, str) or not name:
        raise ManifestError(doc.file, doc.index, f"{kind} {namespace}/?", "metadata.name",
                            "required field is missing (simulate names no pods from generateName)")
    uid = str(meta.get("uid") or hashlib.sha1(f"{namespace}/{name}".encode(), usedforsecurity=False).hexdigest()[:32])
    return meta, namespace, name, uid


def _labels(meta: Mapping[str, Any], key: str) -> dict[str, str]:
    raw = meta.get(key)
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}


def _queue(doc: Document, shown: str, labels: Mapping[str, str], namespace: str) -> str | None:
    queue = labels.get(QUEUE_NAME_LABEL)
    if queue is None or namespace in p.UNMANAGED_NAMESPACES:
        return None
    try:
        check_queue_name(_Where(doc, shown), queue)
    except ObjectError as e:
        raise ManifestError(doc.file, doc.index, shown, e.field, e.message) from None
    return queue


def _serving_annotations(annotations: Mapping[str, str]) -> dict[str, str]:
    return {SIM_DURATION_ANNOTATION: NEVER, **annotations}


class _Pods:
    """The pods seen so far, and which groups have their Workload already."""

    def __init__(self) -> None:
        self.groups: dict[tuple[str, str], list[tuple[Document, p.PodInfo]]] = {}
        self.made: set[tuple[str, str]] = set()

    def pod(self, doc: Document, extra_annotations: Mapping[str, str] | None = None) -> list[Document]:
        meta, namespace, name, _ = _meta(doc)
        info = p.pod_info({**doc.body, "metadata": {**meta, "namespace": namespace}})
        if extra_annotations:
            info = p.PodInfo(info.namespace, info.name, info.uid, info.labels,
                             {**info.annotations, **extra_annotations}, info.spec, info.phase, info.message)
        shown = f"Pod {info.shown}"
        queue = _queue(doc, shown, info.labels, namespace)
        if queue is None:
            return []
        try:
            total = p.total_count(info)
        except p.GroupError as e:
            raise ManifestError(doc.file, doc.index, shown, e.field, e.message) from None
        if total is None:
            pod_set = {"name": p.MAIN, "count": 1, "template": {"spec": dict(info.spec)}}
            body = workload_body(namespace, p.pod_workload_name(info), queue, [owner_ref("v1", "Pod", name, info.uid)],
                             [pod_set], labels=info.labels, annotations=info.annotations,
                             created=meta.get("creationTimestamp"), priority=priority_fields(info.labels, info.spec))
            return [_checked(doc, shown, [""], body)]
        return self._member(doc, info, queue)

    def _member(self, doc: Document, info: p.PodInfo, queue: str) -> list[Document]:
        key = (info.namespace, info.group)
        members = self.groups.setdefault(key, [])
        members.append((doc, info))
        if key in self.made:
            return []
        pods = [i for _, i in members]
        try:
            sets = p.group_pod_sets(pods)
        except p.GroupError as e:
            raise ManifestError(doc.file, doc.index, f"Pod {e.pod}", e.field, e.message) from None
        if sets is None:
            return []
        self.made.add(key)
        first = pods[0]
        name = p.group_workload_name(pods)
        owners = [owner_ref("v1", "Pod", i.name, i.uid, controller=False) for i in pods]
        pod_sets = [{"name": r.name, "count": r.count, "template": {"spec": dict(r.pod.spec)}} for r in sets]
        annotations = {**first.annotations, p.IS_GROUP_WORKLOAD: "true"}
        if p.serving(first):
            annotations = _serving_annotations(annotations)
        body = workload_body(info.namespace, name, queue, owners, pod_sets, labels=first.labels,
                             annotations=annotations, created=(doc.body.get("metadata") or {}).get("creationTimestamp"),
                             priority=priority_fields(first.labels, first.spec))
        return [_checked(doc, f"Pod {info.shown}", [""] * len(pod_sets), body)]

    def incomplete(self) -> None:
        for key, members in self.groups.items():
            if key in self.made:
                continue
            doc, first = members[0]
            total = p.check_group([i for _, i in members])
            runnable = sum(p.runnable(i) for _, i in members)
            field = f"metadata.annotations.{p.GROUP_TOTAL_COUNT}"
            raise ManifestError(doc.file, doc.index, f"Pod {first.shown}", field,
                                f"group '{first.group}' has {runnable} runnable pod(s) of {total}: Kueue makes its "
                                "Workload only when all are there, so it would never be admitted")


def _deployment(doc: Document, pods: _Pods) -> list[Document]:
    meta, namespace, name, _ = _meta(doc)
    shown = f"Deployment {namespace}/{name}"
    labels = _labels(meta, "labels")
    where = _Where(doc, shown)
    if _queue(doc, shown, labels, namespace) is None:
        return []
    n = s.replicas(where, doc.body)
    if n > s.MAX_REPLICAS:
        raise where.error("spec.replicas", f"must be at most {s.MAX_REPLICAS} (the most kueuelog simulates), got {n}")
    template = s.template(where, doc.body)
    tmeta = p.obj_of(template.get("metadata"))
    out: list[Document] = []
    for i in range(n):
        pod_labels = {**_labels(tmeta, "labels"), **s.propagated_labels(labels)}
        annotations = {**_labels(tmeta, "annotations"), **s.parent_annotation("deployment")}
        pod = {"apiVersion": "v1", "kind": "Pod", "spec": template.get("spec"),
               "metadata": {"name": f"{name}-{i}", "namespace": namespace, "labels": pod_labels,
                            "annotations": annotations, "creationTimestamp": meta.get("creationTimestamp"),
                            "ownerReferences": [owner_ref("apps/v1", "Deployment", name, "")]}}
        for made in pods.pod(Document(doc.file, doc.index, pod)):
            body = made.body
            body["metadata"]["annotations"] = _serving_annotations(body["metadata"]["annotations"])
            out.append(made)
    return out


def _groups(doc: Document) -> list[Document]:
    """A StatefulSet's or LeaderWorkerSet's Workloads, made from the object itself."""
    meta, namespace, name, uid = _meta(doc)
    kind = str(doc.body.get("kind"))
    shown = f"{kind} {namespace}/{name}"
    labels = _labels(meta, "labels")
    where = _Where(doc, shown)
    queue = _queue(doc, shown, labels, namespace)
    if queue is None:
        return []
    api_version = str(doc.body.get("apiVersion"))
    if kind == "StatefulSet":
        one = s.statefulset_workload(where, name, uid, doc.body)
        made = [one] if one is not None else []
    else:
        made = s.lws_workloads(where, name, uid, doc.body)
    out = []
    for wl in made:
        pod_sets = [{"name": ps.name, "count": ps.count, "template": {"spec": dict(ps.template.get("spec") or {})}}
                    for ps in wl.pod_sets]
        annotations = _serving_annotations({**_labels(meta, "annotations"), p.IS_GROUP_WORKLOAD: "true"})
        first_spec = wl.pod_sets[0].template.get("spec") or {}
        body = workload_body(namespace, wl.name, queue, [owner_ref(api_version, kind, name, uid)], pod_sets,
                         labels=labels, annotations=annotations, created=meta.get("creationTimestamp"),
                         priority=priority_fields(labels, first_spec))
        out.append(_checked(doc, shown, [dotted(ps.path) for ps in wl.pod_sets], body))
    return out


def expand(docs: Sequence[Document]) -> list[Document]:
    """``docs`` with every Pod, Deployment, StatefulSet and LeaderWorkerSet replaced by the
    Workloads Kueue makes for it (see the module docstring); raises ManifestError on bad input."""
    pods = _Pods()
    names = _Names()  # a Pod with generateName is named as the API server would (events.generatename)
    out: list[Document] = []
    for doc in docs:
        key = _key(doc)
        if key is None:
            out.append(doc)
        elif key == POD:
            out.extend(pods.pod(names.name(doc)))
        elif key == s.DEPLOYMENT:
            out.extend(_deployment(doc, pods))
        else:
            out.extend(_groups(doc))
    pods.incomplete()
    return out

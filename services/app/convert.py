"""Front-end kinds (a scheduler's own quota objects) to Kueue manifests: ``kueuelog convert``.

kueuelog's engine reads Kueue objects only. A *front end* is another scheduler's quota kind
(ACK's ``ElasticQuotaTree``, T9k's ``Queue``, ...) that kueuelog accepts by translating it into
Kueue manifests; the translation is the one place its semantics are decided, and the user can
print it (``kueuelog convert FILE``) and keep it.

The registry maps ``(apiVersion, kind)`` to a :data:`Converter`: a function from every document
of that kind in the input (in order) to a :class:`Conversion`: the Kueue manifests that stand for
them, each tied to the document it comes from (errors and positions point there), notes about
what has no Kueue equivalent, and optionally a ``rewrite`` of the *other* documents (a front end
that routes workloads by namespace adds the queue a Job would otherwise need, say).

:func:`expand` applies every registered converter to a document stream; ``simulate`` (through
:func:`events.manifests.load`) and ``convert`` both use it, so what ``simulate`` runs is exactly
what ``convert`` prints. Kueue's own kinds pass through unchanged.

To register another kind, in a new module ``services/app/frontend_<name>.py`` (or in
``events/`` where the translation belongs to the contract)::

    from services.app.convert import Conversion, register

    def _queues(docs: Sequence[Document]) -> Conversion:
        ...  # raise events.manifests.ManifestError for bad input (file, document, object, field)
        return Conversion(manifests=[(doc, {...kueue manifest...}), ...], notes=["..."])

    register("example.io/v1", "Queue", _queues)

and import that module in :func:`_load_frontends` below (one line).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from events.jobkinds import pod_documents
from events.manifests import Document, load, read_documents
from services.runtime.manifestfiles import read_manifests

Rewrite = Callable[[Document], "list[Document] | None"]
"""A front end's view of another document: ``None`` leaves it as it is; a list replaces it
(an empty list drops it)."""


@dataclass
class Conversion:
    """What a front end's documents become."""

    manifests: list[tuple[Document, Any]] = field(default_factory=list)
    """Kueue manifests (plain bodies), each with the front-end document it comes from."""
    notes: list[str] = field(default_factory=list)
    """What has no Kueue equivalent, or behaves differently under Kueue: printed by ``convert``."""
    rewrite: Rewrite | None = None
    """How the front end changes the other documents (workload routing), if it does."""


Converter = Callable[[Sequence[Document]], Conversion]
"""Every document of one registered kind, in input order, to their :class:`Conversion`."""

REGISTRY: dict[tuple[str, str], Converter] = {}
NATIVE: set[tuple[str, str]] = set()
"""Front-end kinds the engine reads itself (T9k's Queue: ``events.t9k``): ``simulate`` keeps them as
they are, and only ``convert`` prints their closest Kueue equivalent."""


def register(api_version: str, kind: str, converter: Converter, *, native: bool = False) -> None:
    """Make ``(api_version, kind)`` a front-end kind (once per kind); ``native``: see :data:`NATIVE`."""
    key = (api_version, kind)
    if key in REGISTRY:
        raise ValueError(f"front end {kind} ({api_version}) is registered twice")
    REGISTRY[key] = converter
    if native:
        NATIVE.add(key)


def _load_frontends() -> None:
    """Import the modules that register front ends (one line per front end; imported once)."""
    import services.app.frontend_ack  # registers ElasticQuotaTree
    import services.app.frontend_t9k  # noqa: F401  (registers Queue, native)


def _key(doc: Document, printing: bool = True) -> tuple[str, str] | None:
    body = doc.body
    if not isinstance(body, dict):
        return None
    api_version, kind = body.get("apiVersion"), body.get("kind")
    key = (api_version, kind)
    if isinstance(api_version, str) and isinstance(kind, str) and key in REGISTRY and (printing or key not in NATIVE):
        return (api_version, kind)
    return None


@dataclass
class Expansion:
    documents: list[Document]
    """The input with every front-end document replaced by its Kueue manifests (and other
    documents rewritten as the front ends route them)."""
    notes: list[str]


def expand_all(docs: Sequence[Document], *, printing: bool = True) -> Expansion:
    """Every registered front end applied to ``docs`` (raises ManifestError on bad input); without
    ``printing`` (``simulate``), the :data:`NATIVE` kinds are left as they are."""
    _load_frontends()
    by_kind: dict[tuple[str, str], list[Document]] = {}
    for doc in docs:
        key = _key(doc, printing)
        if key is not None:
            by_kind.setdefault(key, []).append(doc)
    conversions = [REGISTRY[k](group) for k, group in by_kind.items()]
    produced: dict[int, list[Document]] = {}
    for conv in conversions:
        for source, body in conv.manifests:
            produced.setdefault(id(source), []).append(Document(source.file, source.index, body))
    out: list[Document] = []
    rewrites = [c.rewrite for c in conversions if c.rewrite is not None]
    for doc in docs:
        if _key(doc, printing) is not None:
            out.extend(produced.get(id(doc), []))
            continue
        out.extend(_rewritten(doc, rewrites))
    out = pod_documents.expand(out)  # Pods, pod groups and serving kinds: the Workloads Kueue makes
    return Expansion(out, [n for c in conversions for n in c.notes])


def _rewritten(doc: Document, rewrites: Sequence[Rewrite]) -> list[Document]:
    for rewrite in rewrites:
        replaced = rewrite(doc)
        if replaced is not None:
            return replaced
    return [doc]


def expand(docs: list[Document]) -> list[Document]:
    """:func:`expand_all` without the notes: the hook :func:`events.manifests.load` takes."""
    return expand_all(docs, printing=False).documents


def convert_files(files: dict[str, str]) -> tuple[list[Any], list[str]]:
    """The Kueue manifests (and notes) for every document of ``files``; the result is validated
    the way ``simulate`` would take it, so what is printed is what runs."""
    docs = [d for file, text in files.items() for d in read_documents(file, text)]
    expansion = expand_all(docs)
    load(files, expand=expand)  # refuses whatever simulate would refuse
    return [d.body for d in expansion.documents], expansion.notes


def convert(paths: Sequence[str]) -> int:
    """``kueuelog convert FILE...``: Kueue manifests on stdout, notes as YAML comments before them."""
    manifests, notes = convert_files(read_manifests(paths))
    out = sys.stdout
    for note in notes:
        out.write(f"# note: {note}\n")
    yaml.safe_dump_all(manifests, out, sort_keys=False, default_flow_style=False, explicit_start=True)
    return 0

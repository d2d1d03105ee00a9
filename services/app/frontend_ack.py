"""ACK's ElasticQuotaTree as a front end (seed 003): the translation is :mod:`events.elasticquota`."""

from __future__ import annotations

from collections.abc import Sequence

from events.elasticquota import API_VERSION, KIND, convert_trees
from events.manifests import Document
from services.app.convert import Conversion, register


def _convert(docs: Sequence[Document]) -> Conversion:
    t = convert_trees(docs)
    return Conversion(manifests=t.manifests, notes=t.notes, rewrite=t.rewrite)


register(API_VERSION, KIND, _convert)

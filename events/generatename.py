"""Names for manifests written with ``metadata.generateName`` and no ``metadata.name``.

The API server appends five random characters to the prefix. ``simulate`` must give the same
input the same output, so kueuelog derives the five characters instead:

    name = prefix[:58] + 5 characters of Kubernetes' alphabet ``bcdfghjklmnpqrstvwxz2456789``,
           taken from SHA-256 over (the document's content, its ordinal, an attempt number)

- *content* is the document as parsed (keys sorted), so the name does not depend on the file's
  path or on the other documents;
- *ordinal* is the document's position among the documents of the same kind and namespace with
  the same ``generateName`` (0, 1, …), so two identical Jobs get two names;
- *attempt* starts at 0 and is raised only if the name is already taken by an earlier object of
  the same kind and namespace.

The 58-character cut is the API server's (``names.MaxGeneratedNameLength``). Only Jobs and
Workloads are named this way; other kinds need a ``metadata.name``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Set
from typing import Any

ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery/pkg/util/rand: no vowels, no 0/1/3
SUFFIX_LENGTH = 5
MAX_PREFIX = 63 - SUFFIX_LENGTH


def _plain(value: Any) -> Any:
    """``value`` with every mapping key a string and every set a sorted list, for json.dumps."""
    if isinstance(value, dict):
        return {k if isinstance(k, str) else f"{type(k).__name__}:{k!r}": _plain(x) for k, x in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(x) for x in value]
    if isinstance(value, set | frozenset):
        return sorted(repr(x) for x in value)
    return value


def content_digest(body: Any) -> bytes:
    text = json.dumps(_plain(body), sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def generated_name(prefix: str, content: bytes, ordinal: int, attempt: int = 0) -> str:
    digest = hashlib.sha256(content + f"\n{ordinal}\n{attempt}".encode()).digest()
    n = int.from_bytes(digest[:8], "big")
    suffix = []
    for _ in range(SUFFIX_LENGTH):
        n, r = divmod(n, len(ALPHABET))
        suffix.append(ALPHABET[r])
    return prefix[:MAX_PREFIX] + "".join(suffix)


def free_name(prefix: str, content: bytes, ordinal: int, taken: Set[str]) -> str:
    """The first generated name (attempt 0, 1, …) not in ``taken``."""
    attempt = 0
    while (name := generated_name(prefix, content, ordinal, attempt)) in taken:
        attempt += 1
    return name

"""Reading manifest files: with a size cap, so that ``/dev/zero`` or a runaway file is refused
with its name instead of filling the memory."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from events.manifests import decode_file
from events.validation import MAX_MANIFEST_BYTES


def read_manifests(paths: Iterable[str | Path]) -> dict[str, str]:
    """File name -> text, in the order given (the order objects are applied in); a file over
    ``MAX_MANIFEST_BYTES`` or not UTF-8 is a ``ManifestError``, one that cannot be read an ``OSError``."""
    files: dict[str, str] = {}
    for path in paths:
        with open(path, "rb") as f:
            data = f.read(MAX_MANIFEST_BYTES + 1)  # one byte over the cap is enough to refuse
        files[str(path)] = decode_file(str(path), data)
    return files

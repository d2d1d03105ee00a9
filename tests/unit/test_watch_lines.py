"""A watch stream split into its JSON documents (``services.runtime.kubeclient.watch_lines``),
however the server's chunks fall: the watcher, the job reconciler and the actuator's watched
copies all read their streams through it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from services.runtime.kubeclient import watch_lines


class _Content:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def iter_any(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


class _Response:
    def __init__(self, chunks: list[bytes]) -> None:
        self.content = _Content(chunks)


async def lines(chunks: list[bytes]) -> list[bytes]:
    resp: Any = _Response(chunks)
    return [line async for line in watch_lines(resp)]


async def test_documents_split_across_chunks_blank_lines_and_a_last_one_without_newline() -> None:
    got = await lines([b'{"a":', b'1}\n\n{"b"', b':2}\n  \n{"c":3}'])
    assert got == [b'{"a":1}', b'{"b":2}', b'{"c":3}']


async def test_a_document_longer_than_aiohttps_readline_limit() -> None:
    big = b'{"x":"' + b"y" * 300_000 + b'"}'
    got = await lines([big[:100_000], big[100_000:], b"\n", b'{"z":1}\n'])
    assert got == [big, b'{"z":1}']

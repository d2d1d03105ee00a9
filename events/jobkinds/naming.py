"""How a Workload is named after the object it stands for, and the queue-name label's rule."""

from __future__ import annotations

import hashlib
import re

from events.cluster import QUEUE_NAME_LABEL
from events.podspec import Where

MAX_NAME = 253
_HASH_LENGTH = 5
_MAX_PREFIX = MAX_NAME - 1 - _HASH_LENGTH  # 247: room for "-" and the hash
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def workload_name(kind: str, group: str, owner_name: str, owner_uid: str) -> str:
    """Kueue's ``jobframework.GetWorkloadNameForOwnerWithGVK``: ``<kind in lowercase>-<name>`` cut to
    247 characters, a dash, and the first five hex digits of SHA-1 over kind, group, name and uid,
    one per line."""
    digest = hashlib.sha1(f"{kind}\n{group}\n{owner_name}\n{owner_uid}".encode(), usedforsecurity=False).hexdigest()
    prefix = f"{kind.lower()}-{owner_name}"[:_MAX_PREFIX]
    return f"{prefix}-{digest[:_HASH_LENGTH]}"


def check_queue_name(where: Where, queue: str) -> None:
    """Kueue's job webhooks: the queue-name label must name a LocalQueue
    (``jobframework.ValidateLabelAsCRDName``)."""
    if not queue:
        raise where.error(f"metadata.labels.{QUEUE_NAME_LABEL}", "must not be empty")
    if len(queue) > MAX_NAME or not DNS_SUBDOMAIN.fullmatch(queue):
        raise where.error(f"metadata.labels.{QUEUE_NAME_LABEL}",
                          f"invalid value {queue!r}: must be a lowercase RFC 1123 subdomain (a LocalQueue name)")

"""Fair sharing (placeholder until the fair-sharing work lands)."""

from __future__ import annotations

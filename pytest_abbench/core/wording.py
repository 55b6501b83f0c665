"""Small pieces of the product's English, one place for each."""

from __future__ import annotations


def count(n: int, noun: str) -> str:
    """``1 round``, ``2 rounds``: a number and its noun, singular or plural."""
    return f"{n} {noun}{'' if n == 1 else 's'}"

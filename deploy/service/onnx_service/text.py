"""Bounded excerpts of client-sent text for error messages (validation, routing and model loading share them)."""

from __future__ import annotations

EXCERPT_CHARS = 60  # the most characters of client-sent text an error message repeats


def excerpt(text: str, tail: bool = False) -> str:
    """``text`` as a repr, cut to EXCERPT_CHARS characters (its end when ``tail``: a path's file name): error messages never echo unbounded client input."""
    if len(text) <= EXCERPT_CHARS:
        return repr(text)
    if tail:
        return "..." + repr(text[-EXCERPT_CHARS:]) + f" ({len(text)} characters)"
    return repr(text[:EXCERPT_CHARS]) + f"... ({len(text)} characters)"

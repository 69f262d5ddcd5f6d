"""Several versions of a model behind one endpoint: aliases, a deterministic traffic split, a shadow version.

A ``Routing`` is immutable. Changing it (``PUT /admin/routing``) loads the new versions
first, then replaces the routing in one assignment: a request in flight keeps the routing, and so
the model, it started with, and no request ever sees a half-built state (notebook 13).

The routing document (JSON)::

    {"versions": {"1": "models/v1.onnx", "2": "models/v2.onnx"},
     "aliases": {"champion": "1", "challenger": "2"},
     "challenger_percent": 10,
     "shadow": "2"}

A version may name the sha256 its file must have: ``"2": {"path": "models/v2.onnx", "sha256": "9f86..."}``;
the service then refuses the document when the file it loads (or already holds) has another one.

``champion`` answers every request, except the ``challenger_percent`` of request keys
(``X-Request-Key`` header) whose hash falls below it: the same key always gets the same version.
``shadow`` (optional) also runs every request; its answers are compared and counted, never returned.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .model import InputContract, LoadedModel
from .text import excerpt

CHAMPION, CHALLENGER = "champion", "challenger"
KEY_HEADER = "x-request-key"


class RoutingError(ValueError):
    """A routing document the service refuses; the message says what is wrong."""


@dataclass
class Version:
    """One loaded version and what runs it (its own batcher when batching is on: batches never mix versions)."""

    name: str
    model: LoadedModel
    runner: Any = None


def bucket(key: str) -> int:
    """The request key's bucket, 0-99: the first 4 bytes of its sha256, modulo 100 (stable across processes)."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:4], "big") % 100


def key_from_header(value: str | None) -> str | None:
    """The request key a client sent in ``X-Request-Key``: the header's bytes read as UTF-8.

    HTTP servers hand header values over decoded as latin-1 (starlette does), so "café" sent as UTF-8 arrives as
    "cafÃ©"; its bytes, read as UTF-8, are what the client sent and what ``bucket`` hashes on the client's side too.
    """
    if value is None:
        return None
    return value.encode("latin-1", errors="replace").decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Routing:
    """Versions by name, aliases to them, the challenger's share of request keys and the shadow version."""

    versions: Mapping[str, Version]
    aliases: Mapping[str, str]
    challenger_percent: int = 0
    shadow: str | None = None
    paths: Mapping[str, str] = field(default_factory=dict)

    def pick(self, key: str | None) -> tuple[str, Version]:
        """(alias, version) answering a request with this key: the challenger for its share of keys, else the champion."""
        challenger = self.aliases.get(CHALLENGER)
        if key and challenger and self.challenger_percent and bucket(key) < self.challenger_percent:
            return CHALLENGER, self.versions[challenger]
        return CHAMPION, self.versions[self.aliases[CHAMPION]]

    def describe(self) -> dict[str, Any]:
        """Versions (name, file, sha256), aliases, split and shadow: what GET /admin/routing shows."""
        return {
            "versions": {
                name: {"model": v.model.name, "file": v.model.path.name, "sha256": v.model.sha256, "opset": v.model.opset}
                for name, v in self.versions.items()
            },
            "aliases": dict(self.aliases),
            "challenger_percent": self.challenger_percent,
            "shadow": self.shadow,
        }


VERSION_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")  # names travel in the X-Model-Version header and in metric labels


def version_name(stem: str) -> str:
    """A file stem as a version name: characters outside VERSION_NAME become "_" (a stem with none of them: "1")."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("_")[:64]
    return name or "1"


def single(name: str, model: LoadedModel, runner: Any = None) -> Routing:
    """The routing of a service started with one model: that model is the champion."""
    return Routing({name: Version(name, model, runner)}, {CHAMPION: name}, paths={name: str(model.path)})


SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_PATH_CHARS = 1024
VERSION_FIELDS = ("path", "sha256")


def _check_path(name: str, path: Any) -> str:
    if not isinstance(path, str) or not 0 < len(path) <= MAX_PATH_CHARS or not path.isprintable():
        raise RoutingError(f"version {name}: the path must be printable text of 1-{MAX_PATH_CHARS} characters, got {_value(path)}")
    return path


def _check_source(name: str, source: Any) -> tuple[str, str | None]:
    """(path, expected sha256 or None) of one entry of "versions": a path, or {"path": ..., "sha256": ...}."""
    if not isinstance(source, dict):
        return _check_path(name, source), None
    if "path" not in source or any(key not in VERSION_FIELDS for key in source):
        fields = ", ".join(excerpt(str(key)) for key in list(source)[:5]) or "none"
        raise RoutingError(f'version {name}: expected a path or {{"path": ..., "sha256": ...}}, got an object with the fields {fields}')
    digest = source.get("sha256")
    if digest is not None and (not isinstance(digest, str) or not SHA256.fullmatch(digest)):
        raise RoutingError(f"version {name}: sha256 must be 64 lower-case hex digits, got {_value(digest)}")
    return _check_path(name, source["path"]), digest


def _check_versions(versions: Any) -> tuple[dict[str, str], dict[str, str]]:
    if not isinstance(versions, dict) or not versions:
        raise RoutingError('"versions" must map version names to .onnx paths, e.g. {"1": "models/v1.onnx"}')
    paths, digests = {}, {}
    for name, source in versions.items():
        if not VERSION_NAME.fullmatch(name):
            raise RoutingError(f"version name {excerpt(name)} must be 1-64 characters among A-Z a-z 0-9 . _ -")
        paths[name], digest = _check_source(name, source)
        if digest:
            digests[name] = digest
    return paths, digests


DOCUMENT_FIELDS = ("versions", "aliases", "challenger_percent", "shadow")


def _value(value: Any) -> str:
    """A bounded excerpt of any JSON value a client sent."""
    return excerpt(value) if isinstance(value, str) else f"a JSON {type(value).__name__}"


@dataclass(frozen=True)
class Document:
    """A routing document the service accepts: version paths, the sha256 some of them must have, aliases, split, shadow."""

    versions: dict[str, str]
    sha256: dict[str, str]
    aliases: dict[str, str]
    challenger_percent: int
    shadow: str | None


def check_document(document: Any) -> Document:
    """The routing document, checked field by field; RoutingError says what is wrong."""
    if not isinstance(document, dict):
        raise RoutingError('expected a JSON object like {"versions": {...}, "aliases": {"champion": ...}}')
    unknown = sorted(excerpt(str(key)) for key in document if key not in DOCUMENT_FIELDS)[:5]
    if unknown:  # a misspelt "challenger_precent" would otherwise be ignored and the split left at 0
        raise RoutingError(f"unknown field(s) {', '.join(unknown)}: a routing document has only {', '.join(DOCUMENT_FIELDS)}")
    (versions, digests), aliases = _check_versions(document.get("versions")), document.get("aliases")
    if not isinstance(aliases, dict) or CHAMPION not in aliases:
        raise RoutingError('"aliases" must name the champion version, e.g. {"champion": "1"}')
    for alias, name in aliases.items():
        if alias not in (CHAMPION, CHALLENGER) or not isinstance(name, str) or name not in versions:
            raise RoutingError(f"aliases must be champion/challenger and point at listed versions; got {excerpt(alias)}: {_value(name)}")
    percent = document.get("challenger_percent", 0)
    if not isinstance(percent, int) or isinstance(percent, bool) or not 0 <= percent <= 100:
        raise RoutingError(
            f'"challenger_percent" must be a whole number 0-100, got {_value(percent) if not isinstance(percent, int) else percent}'
        )
    if percent and CHALLENGER not in aliases:
        raise RoutingError('"challenger_percent" > 0 needs a "challenger" alias')
    shadow = document.get("shadow")
    if shadow is not None and (not isinstance(shadow, str) or shadow not in versions):
        raise RoutingError(f'"shadow" must be one of the listed versions or null, got {_value(shadow)}')
    return Document(versions, digests, dict(aliases), percent, shadow)


def _verified(name: str, model: LoadedModel, expected: str | None) -> LoadedModel:
    if expected and model.sha256 != expected:
        raise RoutingError(
            f"version {name}: {model.path.name} has sha256 {model.sha256}, the document expects {expected} "
            "(the file changed since it was registered, or the document names the wrong file)"
        )
    return model


def build(
    document: Any,
    current: Routing,
    contract: InputContract,
    load: Callable[[str], LoadedModel],
    make_runner: Callable[[LoadedModel], Any],
) -> Routing:
    """A new routing from a routing document; versions already loaded from the same file (and sha256, if given) are reused.

    Every version must take every request the service's ``contract`` accepts: the same input, and batches
    up to its ``max_batch`` (a version with a fixed batch of 1 cannot serve a 64-example request). The
    request contract never changes under the callers' feet. Raises RoutingError (and ModelError from ``load``).
    """
    checked = check_document(document)
    loaded: dict[str, Version] = {}
    for name, path in checked.versions.items():
        expected = checked.sha256.get(name)
        reuse = next((v for n, v in current.versions.items() if current.paths.get(n) == path and expected in (None, v.model.sha256)), None)
        model = _verified(name, reuse.model if reuse else load(path), expected)
        takes = model.contract(contract.max_batch)
        if takes != contract:
            raise RoutingError(
                f"version {name} takes {takes.shape_text(batch=True)} {takes.dtype} with at most {takes.max_batch} example(s); "
                f"the service takes {contract.shape_text(batch=True)} {contract.dtype} with up to {contract.max_batch}"
            )
        loaded[name] = reuse if reuse and reuse.name == name else Version(name, model, reuse.runner if reuse else make_runner(model))
    return Routing(loaded, checked.aliases, checked.challenger_percent, checked.shadow, checked.versions)

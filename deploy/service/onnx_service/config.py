"""Service settings: environment variables with documented defaults, overridable on the command line."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields

from .providers import PROVIDERS
from .routing import VERSION_NAME

PREFIX = "ONNX_SERVICE_"
HANDLERS = ("threadpool", "naive")


class ConfigError(ValueError):
    """A setting has a value the service cannot use; the message names the variable and what it expects."""


@dataclass(frozen=True)
class Settings:
    """Everything the service reads at start-up (one environment variable per field, ``ONNX_SERVICE_<FIELD>``)."""

    model: str = "artifacts/digits_cnn.onnx"  # path of the .onnx file (relative to the working directory)
    model_sha256: str = ""  # expected sha256 of the model file; empty = not checked
    model_name: str = ""  # version name in /predict answers, X-Model-Version and /metrics; empty = the file name without .onnx
    host: str = "127.0.0.1"  # loopback only by default; the container sets 0.0.0.0
    port: int = 8080
    workers: int = 1  # uvicorn worker processes (each loads its own copy of the model)
    threads: int = 1  # ONNX Runtime intra-op threads per session
    provider: str = "cpu"  # "cpu" (ONNX Runtime's CPU provider) or "openvino" (the onnxruntime-ep-openvino plugin, Intel CPUs)
    max_batch: int = 64  # most examples accepted in one request
    max_body_bytes: int = 0  # largest request body accepted; 0 = derived from the model's input and max_batch (edge.body_limit)
    body_timeout_seconds: float = 10.0  # a body not received in full this long after the request began: 408
    concurrency_limit: int = 512  # requests served at once by one worker (probes excepted); beyond it 503 + Retry-After
    root_path: str = ""  # the path prefix of a proxy in front (e.g. /user/ana/proxy/8080): /docs loads its files under it
    handler: str = "threadpool"  # "threadpool" (inference off the event loop) or "naive" (blocks it; for the notebook)
    batching: bool = False  # dynamic batching: concurrent /predict requests are queued and run as one batch
    batch_max_size: int = 32  # most examples in one merged batch (a larger single request runs alone)
    batch_max_wait_ms: float = 2.0  # longest wait for more requests after the first one arrives
    batch_queue_limit: int = 256  # most requests waiting for an inference slot (every mode); beyond it 503 + Retry-After
    drain_seconds: float = 0.0  # after SIGTERM: /ready answers 503 this long while requests are still served, then shutdown
    routing: str = ""  # a JSON routing document: several versions, aliases, split, shadow (notebook 13); empty = MODEL only
    admin_token: str = ""  # enables PUT /admin/routing for callers sending "Authorization: Bearer <token>"; empty = off
    log_level: str = "info"
    access_log: bool = False  # one log line per request (off: it costs throughput)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Settings from ``ONNX_SERVICE_*`` variables, then ``overrides`` (None values are ignored), validated."""
        environ = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for field in fields(cls):
            raw = environ.get(PREFIX + field.name.upper())
            if raw is not None and raw.strip() != "":
                values[field.name] = _convert(field.name, raw.strip(), field.type)
        values.update({key: value for key, value in overrides.items() if value is not None})
        settings = cls(**values)
        settings.validate()
        return settings

    def validate(self) -> None:
        """Raise ConfigError naming the variable and the expected value when a setting is out of range."""

        def bad(name: str, expected: str) -> ConfigError:
            return ConfigError(f"{PREFIX}{name.upper()}={getattr(self, name)!r}: expected {expected}")

        self._check_names(bad)
        self._check_numbers(bad)
        self._check_choices(bad)

    def _check_names(self, bad: Callable[[str, str], ConfigError]) -> None:
        if not self.model:
            raise bad("model", "the path of an .onnx file")
        if self.model_name and not VERSION_NAME.fullmatch(self.model_name):
            raise bad("model_name", "1-64 characters among A-Z a-z 0-9 . _ - (it travels in the X-Model-Version header)")
        if self.model_sha256 and not re.fullmatch(r"[0-9a-fA-F]{64}", self.model_sha256):
            raise bad("model_sha256", "64 hexadecimal digits (the output of sha256sum)")

    def _check_numbers(self, bad: Callable[[str, str], ConfigError]) -> None:
        if not 0 <= self.port <= 65535:
            raise bad("port", "a port number 0-65535")
        for name, low, high in (
            ("workers", 1, 64),
            ("threads", 1, 256),
            ("max_batch", 1, 1_000_000),
            ("batch_max_size", 1, 1_000_000),
            ("batch_queue_limit", 1, 1_000_000),
            ("concurrency_limit", 1, 1_000_000),
        ):
            if not low <= getattr(self, name) <= high:
                raise bad(name, f"a whole number from {low} to {high}")
        if not 0 <= self.drain_seconds <= 300:
            raise bad("drain_seconds", "seconds from 0 to 300")
        if not 0 <= self.batch_max_wait_ms <= 1000:
            raise bad("batch_max_wait_ms", "milliseconds from 0 to 1000")
        if self.max_body_bytes and self.max_body_bytes < 1024:
            raise bad("max_body_bytes", "0 (derived from the model) or at least 1024 bytes")
        if not 0 < self.body_timeout_seconds <= 300:
            raise bad("body_timeout_seconds", "seconds from more than 0 to 300")

    def _check_choices(self, bad: Callable[[str, str], ConfigError]) -> None:
        if self.batching and self.handler != "threadpool":
            raise bad("handler", "threadpool when ONNX_SERVICE_BATCHING=1 (the batcher runs inference off the event loop)")
        if self.root_path and not re.fullmatch(r"(/[A-Za-z0-9._~%-]+)+", self.root_path):
            raise bad("root_path", "a path like /user/ana/proxy/8080 (no trailing slash)")
        if not re.fullmatch(r"[!-~]*", self.admin_token):
            # the message leaves the secret out; HTTP headers carry ASCII: a UTF-8 token could never match what a client sends
            raise ConfigError(f"{PREFIX}ADMIN_TOKEN: expected visible ASCII characters only (no spaces, no accents)")
        if self.handler not in HANDLERS:
            raise bad("handler", " or ".join(HANDLERS))
        if self.provider not in PROVIDERS:
            raise bad("provider", " or ".join(PROVIDERS))
        if self.log_level.lower() not in {"critical", "error", "warning", "info", "debug", "trace"}:
            raise bad("log_level", "critical, error, warning, info, debug or trace")

    def to_env(self) -> dict[str, str]:
        """The ``ONNX_SERVICE_*`` variables that reproduce these settings (how worker processes get them)."""
        return {PREFIX + key.upper(): (str(int(value)) if isinstance(value, bool) else str(value)) for key, value in asdict(self).items()}


def _convert(name: str, raw: str, kind: object) -> object:
    kind = kind if isinstance(kind, str) else getattr(kind, "__name__", str(kind))
    if kind == "int":
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"{PREFIX}{name.upper()}={raw!r}: expected a whole number") from None
    if kind == "float":
        try:
            return float(raw)
        except ValueError:
            raise ConfigError(f"{PREFIX}{name.upper()}={raw!r}: expected a number") from None
    if kind == "bool":
        if raw.lower() in {"1", "true", "yes", "on"}:
            return True
        if raw.lower() in {"0", "false", "no", "off"}:
            return False
        raise ConfigError(f"{PREFIX}{name.upper()}={raw!r}: expected 1/0, true/false, yes/no or on/off")
    return raw

"""A model repository for NVIDIA Triton Inference Server's ONNX Runtime backend, generated from the model itself.

Layout written: ``<repository>/<name>/config.pbtxt`` and ``<repository>/<name>/1/model.onnx``.
Run: ``python -m onnx_service.triton MODEL.onnx REPOSITORY [--name NAME] [--max-batch 64] [--instances 1]``;
``--from-env`` takes the settings from the service's ``ONNX_SERVICE_*`` variables: the batcher's max wait and
queue limit become Triton's ``dynamic_batching`` block (a similar batcher, not the same one: Triton's
``max_batch_size`` bounds both a request and a merged batch), and ``THREADS`` becomes the ONNX Runtime
backend's ``intra_op_thread_count`` (left unset, the backend uses all of the host's cores per instance).
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# ONNX Runtime type strings -> Triton data types
TRITON_TYPES = {
    "tensor(float)": "TYPE_FP32",
    "tensor(double)": "TYPE_FP64",
    "tensor(float16)": "TYPE_FP16",
    "tensor(int64)": "TYPE_INT64",
    "tensor(int32)": "TYPE_INT32",
    "tensor(int16)": "TYPE_INT16",
    "tensor(int8)": "TYPE_INT8",
    "tensor(uint8)": "TYPE_UINT8",
    "tensor(bool)": "TYPE_BOOL",
    "tensor(string)": "TYPE_STRING",
}


class TritonError(ValueError):
    """The model cannot be described for Triton as asked (unsupported type, fixed batch with batching on...)."""


def _dims(shape: tuple, batched: bool, what: str) -> list[int]:
    if batched:
        if not shape or (isinstance(shape[0], int) and shape[0] > 0):
            raise TritonError(f"{what}: max_batch_size > 0 needs a dynamic first (batch) dimension, the model has {list(shape)}")
        shape = shape[1:]
    return [d if isinstance(d, int) and d > 0 else -1 for d in shape]


def _dims_lines(dims: list[int]) -> str:
    """Triton refuses ``dims: [ ]``: a tensor with no dims left (a ``[batch]`` label output) is ``[ 1 ]`` reshaped to ``[ ]``."""
    if not dims:
        return "    dims: [ 1 ]\n    reshape: { shape: [ ] }"
    return f"    dims: [ {', '.join(map(str, dims))} ]"


def _tensor_block(kind: str, specs: list[Any], batched: bool) -> str:
    items = []
    for spec in specs:
        if spec.type not in TRITON_TYPES:
            raise TritonError(f"{kind} {spec.name!r} has type {spec.type}, which has no Triton data type here")
        dims = _dims_lines(_dims(tuple(spec.shape), batched, f"{kind} {spec.name!r}"))
        items.append(f'  {{\n    name: "{spec.name}"\n    data_type: {TRITON_TYPES[spec.type]}\n{dims}\n  }}')
    return f"{kind} [\n" + ",\n".join(items) + "\n]"


def thread_parameters(threads: int) -> str:
    """The ONNX Runtime backend's thread settings: ``threads`` per operator (the service's ``THREADS``).

    ``inter_op_thread_count`` is 1 for clarity only: the backend ignores it under its default sequential
    execution mode, which is what runs one node at a time, as the service does.
    """
    if threads < 1:
        raise TritonError(f"threads must be >= 1 (unset, the backend would use every core of the host), got {threads}")
    counts = {"intra_op_thread_count": threads, "inter_op_thread_count": 1}
    return "\n".join(f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}' for key, value in counts.items())


@dataclass(frozen=True)
class DynamicBatching:
    """Triton's ``dynamic_batching`` settings, in the service's terms: max wait and queue limit.

    Triton's batcher guide advises no ``preferred_batch_size`` for most models (only for a size measured to be
    much faster), so ``from_settings`` leaves it out: the service's ``BATCH_MAX_SIZE`` is a cap, not a preference.
    """

    queue_delay_us: int = 100  # max_queue_delay_microseconds: the service's batch_max_wait_ms * 1000
    preferred_batch_sizes: tuple[int, ...] = ()  # only for a batch size measured to be much faster than the others
    max_queue_size: int = 0  # default_queue_policy.max_queue_size: reject beyond it (0 = unbounded)

    @classmethod
    def from_settings(cls, settings: Any) -> DynamicBatching:
        """The block closest to the service's batcher settings: its max wait and its queue limit (``Settings.batch_*``)."""
        return cls(queue_delay_us=round(settings.batch_max_wait_ms * 1000), max_queue_size=settings.batch_queue_limit)

    def text(self, max_batch: int) -> str:
        """The ``dynamic_batching { ... }`` block; raises TritonError for sizes Triton would refuse."""
        if self.queue_delay_us < 0 or self.max_queue_size < 0:
            raise TritonError(f"queue delay and queue size must be >= 0, got {self.queue_delay_us} and {self.max_queue_size}")
        wrong = [size for size in self.preferred_batch_sizes if not 1 <= size <= max_batch]
        if wrong:
            raise TritonError(f"preferred batch sizes {wrong} must be between 1 and max_batch_size {max_batch}")
        lines = [f"  max_queue_delay_microseconds: {self.queue_delay_us}"]
        if self.preferred_batch_sizes:
            lines.insert(0, f"  preferred_batch_size: [ {', '.join(map(str, self.preferred_batch_sizes))} ]")
        if self.max_queue_size:
            lines.append(f"  default_queue_policy {{\n    max_queue_size: {self.max_queue_size}\n  }}")
        return "dynamic_batching {\n" + "\n".join(lines) + "\n}"


def config_text(
    name: str,
    inputs: list[Any],
    outputs: list[Any],
    max_batch: int = 64,
    instances: int = 1,
    batching: DynamicBatching | None = None,
    threads: int = 1,
) -> str:
    """The config.pbtxt text (protobuf text format of Triton's ModelConfig) for a model's inputs and outputs."""
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
        raise TritonError(f"model name {name!r}: use letters, digits, '_', '-' or '.' (it is also a folder name)")
    if max_batch < 0 or instances < 1:
        raise TritonError(f"max_batch must be >= 0 and instances >= 1, got {max_batch} and {instances}")
    batched = max_batch > 0
    parts = [
        f'name: "{name}"',
        'backend: "onnxruntime"',
        f"max_batch_size: {max_batch}",
        _tensor_block("input", inputs, batched),
        _tensor_block("output", outputs, batched),
        f"instance_group [\n  {{\n    count: {instances}\n    kind: KIND_CPU\n  }}\n]",
    ]
    if batched:
        parts.append((batching or DynamicBatching()).text(max_batch))
    parts.append(thread_parameters(threads))
    parts.append("version_policy: { latest: { num_versions: 1 } }")
    return "\n".join(parts) + "\n"


def write_repository(
    model_path: str | Path,
    repository: str | Path,
    name: str | None = None,
    max_batch: int = 64,
    instances: int = 1,
    batching: DynamicBatching | None = None,
    threads: int = 1,
) -> Path:
    """Write ``repository/<name>/config.pbtxt`` and ``repository/<name>/1/model.onnx``; returns the config path."""
    import onnxruntime as ort

    model_path = Path(model_path)
    if not model_path.is_file():
        raise FileNotFoundError(f"model file not found: {model_path}")
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    name = name or model_path.stem
    text = config_text(name, session.get_inputs(), session.get_outputs(), max_batch, instances, batching, threads)
    folder = Path(repository) / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(model_path, folder / "1" / "model.onnx")
    config = folder / "config.pbtxt"
    config.write_text(text, encoding="utf-8")
    return config


_TOKEN = re.compile(r'\s*(?:(#[^\n]*)|([{}\[\]:,])|("(?:[^"\\]|\\.)*")|([A-Za-z0-9_.+\-]+))')


def _pbtxt_tokens(text: str) -> list[str]:
    tokens: list[str] = []
    position = 0
    text = text.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if not match or match.end() == position:
            raise ValueError(f"config.pbtxt: cannot parse at character {position}: {text[position : position + 20]!r}")
        position = match.end()
        token = next((group for group in match.groups()[1:] if group is not None), None)
        if token is not None:
            tokens.append(token)
    return tokens


def _pbtxt_scalar(token: str) -> Any:
    if token.startswith('"'):
        return bytes(token[1:-1], "utf-8").decode("unicode_escape")
    if re.fullmatch(r"[+-]?\d+", token):
        return int(token)
    if re.fullmatch(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?", token):
        return float(token)
    return token  # an enum value such as TYPE_FP32 or KIND_CPU


def _pbtxt_value(tokens: list[str], i: int) -> tuple[Any, int]:
    token = tokens[i]
    if token == "{":
        return _pbtxt_message(tokens, i + 1, "}")
    if token == "[":
        items, i = [], i + 1
        while tokens[i] != "]":
            item, i = _pbtxt_value(tokens, i)
            items.append(item)
            if tokens[i] == ",":
                i += 1
        return items, i + 1
    return _pbtxt_scalar(token), i + 1


def _pbtxt_message(tokens: list[str], i: int, end: str | None) -> tuple[dict[str, Any], int]:
    fields: dict[str, Any] = {}
    while i < len(tokens) and tokens[i] != end:
        key = tokens[i]
        i += 1
        if tokens[i] == ":":
            i += 1
        item, i = _pbtxt_value(tokens, i)
        if key in fields:
            existing = fields[key]
            fields[key] = (existing if isinstance(existing, list) else [existing]) + (item if isinstance(item, list) else [item])
        else:
            fields[key] = item
        if i < len(tokens) and tokens[i] in ",;":
            i += 1
    if end is not None and i >= len(tokens):
        raise ValueError(f"config.pbtxt: missing {end!r}")
    return fields, i + 1


def parse_pbtxt(text: str) -> dict[str, Any]:
    """A small parser for the protobuf text format used by config.pbtxt: messages become dicts, repeated fields lists.

    Enough to check the structure of a generated config (it is not a full protobuf implementation).
    """
    result, _ = _pbtxt_message(_pbtxt_tokens(text), 0, None)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="onnx_service.triton", description="Write a Triton model repository for an ONNX model.")
    parser.add_argument("model")
    parser.add_argument("repository")
    parser.add_argument("--name")
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--instances", type=int, default=1)
    parser.add_argument("--from-env", action="store_true", help="dynamic_batching and threads from the service's ONNX_SERVICE_* settings")
    args = parser.parse_args(argv)
    from .config import Settings

    settings = Settings.from_env() if args.from_env else Settings()
    batching = DynamicBatching.from_settings(settings) if args.from_env else None
    config = write_repository(args.model, args.repository, args.name, args.max_batch, args.instances, batching, settings.threads)
    print(config.read_text(encoding="utf-8"), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

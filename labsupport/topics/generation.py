"""The greedy generation loop over ONNX Runtime, without and with a KV cache: the loop an LLM runtime runs.

Introduced in notebook 11, on the exports of ``labsupport.models.tiny_transformer``: ``generate_full``
feeds the whole sequence every step (``input_ids`` -> ``logits``), ``generate_cached`` feeds the prompt
once and then only the newest token plus the cache (``past_*`` in, ``present_*`` out). Both record the
logits of every step, so that each one can be compared with ``tiny_transformer.generate_torch``.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from labsupport.models.tiny_transformer import Generation, check_prompts


def generate_full(session: ort.InferenceSession, prompts: np.ndarray, new_tokens: int) -> Generation:
    """Greedy decoding over the export *without* cache: every step re-runs the whole sequence (weight work quadratic, attention cubic in the length; notebook 11)."""
    sequence = check_prompts(prompts, new_tokens)
    steps = []
    for _ in range(new_tokens):
        logits = session.run(["logits"], {"input_ids": sequence})[0][:, -1]
        steps.append(logits)
        sequence = np.concatenate([sequence, logits.argmax(axis=-1)[:, None]], axis=1)
    return Generation(sequence[:, prompts.shape[1] :], steps)


def _empty_cache(session: ort.InferenceSession, batch_size: int) -> dict[str, np.ndarray]:
    """Zero-length past tensors for every cache input, with the heads and head size the graph declares."""
    inputs = session.get_inputs()
    if inputs[0].name != "input_ids" or len(inputs) < 3:
        raise ValueError(f"generate_cached needs the cached export (input_ids, past_key_0, ...), got inputs {[i.name for i in inputs]}")
    return {i.name: np.zeros((batch_size, i.shape[1], 0, i.shape[3]), np.float32) for i in inputs[1:]}


def generate_cached(session: ort.InferenceSession, prompts: np.ndarray, new_tokens: int) -> Generation:
    """Greedy decoding over the export *with* a KV cache: the prompt once, then one token per step (the weight work once per token plus attention over the cache; notebook 11)."""
    ids = check_prompts(prompts, new_tokens)
    cache = _empty_cache(session, len(ids))
    tokens, steps = [], []
    for _ in range(new_tokens):
        logits, *presents = session.run(None, {"input_ids": ids, **cache})
        cache = dict(zip(cache, presents, strict=True))
        steps.append(logits[:, -1])
        ids = logits[:, -1].argmax(axis=-1)[:, None].astype(np.int64)
        tokens.append(ids)
    return Generation(np.concatenate(tokens, axis=1), steps)

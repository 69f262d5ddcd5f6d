"""Helpers of one lesson each: quantization and CPU features (06), LLM memory arithmetic (06, 11), serving (08),
the edge (09), compiled custom ops (10), the generation loop (11), Hugging Face (12), the model lifecycle (13)."""

"""Inference: decoding, caches and their memory, speculative decoding.

``decode`` (greedy and beam search), ``kv_memory`` (KV-cache bytes per token of
published models), ``paged_cache`` (blocks, tables, waste), ``speculative`` (draft,
verify, resample).
"""

"""Measuring: translation quality, cost and memory.

``bleu`` (sentence and corpus BLEU), ``cost`` (sequential depth, FLOPs, timing a
call), ``memory`` (the memory a computation allocates).
"""

"""Measuring: translation quality, cost and memory.

``bleu`` (sentence and corpus BLEU), ``cost`` (sequential depth, FLOPs, timing a
call), ``memory`` (the memory a computation allocates).
``attribution`` (attention rollout, gradient x input and occlusion maps of
an image model's prediction).
"""

"""Training: losses, loops, checkpoints, pretraining, data parallelism.

``loop`` (masked cross-entropy, the training loop, schedules), ``checkpoint``
(verified checkpoints), ``bert_pretraining`` (pretraining BERT, fine-tuning it),
``lm_pretraining`` (pretraining a language model on a token stream),
``data_parallel`` (data parallelism by hand), ``distributed`` (the torchrun entry
point: ``python -m course_pkg.training.distributed``).
"""

"""course_pkg: the code behind "Attention, tested".

One module per concept, in the order the book introduces them:

- :mod:`course_pkg.device` — choosing the device, seeding.
- :mod:`course_pkg.data` — the generated English–French corpus, the Tatoeba
  loader, vocabularies, batches.
- :mod:`course_pkg.seq2seq` — the encoder–decoder interface, GRU seq2seq,
  Bahdanau's attention decoder.
- :mod:`course_pkg.train` — masked cross-entropy, the training loop,
  checkpoints.
- :mod:`course_pkg.decode` — greedy decoding (with and without a cache) and
  beam search.
- :mod:`course_pkg.metrics` — sentence and corpus BLEU.
- :mod:`course_pkg.kernel_regression` — Nadaraya–Watson attention pooling.
- :mod:`course_pkg.attention` — masked softmax, scoring functions, multi-head
  attention.
- :mod:`course_pkg.positional` — sinusoidal and learned positional encodings.
- :mod:`course_pkg.transformer` — the Transformer's blocks, encoder, decoder
  and model.
- :mod:`course_pkg.distributed` — data-parallel training with torch.distributed
  (process groups, sharded batches, gradient all-reduce, DDP).
- :mod:`course_pkg.bert` — BERT's encoder, heads and input masking.
- :mod:`course_pkg.bert_data` — BERT's inputs from the corpus: vocabulary,
  segments, translation pairs, tense labels.
- :mod:`course_pkg.pretrain` — pretraining BERT, fine-tuning it, and the
  chapter's experiment.
- :mod:`course_pkg.gpt` — a decoder-only Transformer (GPT), sampling,
  the key/value cache.
- :mod:`course_pkg.lm_translation` — translation as language modelling:
  data, training and translating with a GPT.
- :mod:`course_pkg.plotting` — heatmaps and line plots used by every chapter.
"""

from course_pkg.device import get_device, seed_everything

__all__ = ["get_device", "seed_everything"]

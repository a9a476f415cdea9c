"""Data and tokenizers: text in, tensors out.

``translation`` (normal form, tokens, ``Vocab``, arrays, loaders), ``corpus_grammar``
and ``corpus`` (the generated English-French corpus), ``tatoeba`` (the real pairs),
``shakespeare`` (the works, verified and split by play), ``bpe`` (byte-level BPE),
``bert_inputs`` (BERT's vocabulary, segments and labels).
"""

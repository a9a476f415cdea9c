"""Data and tokenizers: text in, tensors out.

``translation`` (normal form, tokens, ``Vocab``, arrays, loaders), ``corpus_grammar``
and ``corpus`` (the generated English-French corpus), ``tatoeba`` (the real pairs),
``shakespeare`` (the works, verified and split by play), ``bpe`` (byte-level BPE),
``bert_inputs`` (BERT's vocabulary, segments and labels); for the chapter on
images, ``digits`` (5,000 MNIST digits, verified, a fixed split) and
``scenes`` (generated scenes with captions and the cell of every object word).
"""

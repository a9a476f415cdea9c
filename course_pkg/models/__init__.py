"""Whole models built from :mod:`course_pkg.nn`, and their weights' converters.

``encoder_decoder`` (the interface of the translation models), ``seq2seq`` (GRU
encoder-decoder, Bahdanau decoder), ``luong``, ``nadaraya_watson`` (attention
pooling), ``transformer``, ``bert``, ``gpt``, ``gpt2`` (GPT-2 as published),
``variant_gpt`` (a GPT with options), ``llama`` (Llama 3, Qwen3 and Mistral from
the course's pieces), ``gemma`` (Gemma 3 from the same pieces), ``deepseek`` (DeepSeek-V3's latent
attention and experts), ``hf_weights`` (GPT-2 and BERT to and from Hugging Face
state dicts).
"""

"""Whole models built from :mod:`course_pkg.nn`, and their weights' converters.

``encoder_decoder`` (the interface of the translation models), ``seq2seq`` (GRU
encoder-decoder, Bahdanau decoder), ``luong``, ``nadaraya_watson`` (attention
pooling), ``transformer``, ``bert``, ``gpt``, ``gpt2`` (GPT-2 as published),
``variant_gpt`` (a GPT with options), ``hf_weights`` (GPT-2 and BERT to and from
Hugging Face state dicts); today's open models from the same pieces, each with
converters to and from Hugging Face's: ``llama`` (Llama 3, Qwen3, Mistral,
Mixtral, Qwen3-MoE), ``gemma`` (Gemma 3), ``deepseek`` (DeepSeek-V3: latent
attention and its experts), ``t5`` (T5 v1.1: relative position bias);
``published`` (their released configurations, built on the meta device);
``kernel_lm`` (a small decoder whose attention is exact softmax or one of its
linear-time stand-ins); ``vit`` (the Vision Transformer); ``captioner`` (a
CNN's grid read by the Bahdanau decoder, for captions); ``convnet`` (a small
CNN, the ViT's peer at the same number of parameters).
"""

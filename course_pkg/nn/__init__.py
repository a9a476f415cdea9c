"""Attention layers and the blocks built from them: the pieces every model uses.

``masks`` (padding and causal masks, the masked softmax), ``scoring`` (additive,
dot-product and Luong scores), ``attention`` (multi-head attention, its key/value
cache), ``grouped_query`` (grouped-query attention, heads of any width), ``positional`` (sinusoidal and
learned encodings), ``rotary`` (RoPE), ``position_scaling`` (ALiBi, position
interpolation, NTK-aware RoPE), ``rope_scaling`` (Llama 3's RoPE scaling),
``relative_position`` (T5's relative position bias), ``sliding_window`` (the
window mask, the rolling cache), ``gru`` (the GRU layer), ``blocks`` (FFN,
AddNorm, the encoder and decoder blocks, the token embedding), ``modern_blocks``
(RMSNorm, SwiGLU, GeGLU, pre-norm blocks), ``moe`` (the mixture-of-experts
feed-forward layers), ``latent_attention`` (DeepSeek's multi-head latent
attention); beyond softmax attention: ``linear_attention`` (kernel attention,
its recurrent form with decay), ``random_features`` (Performer's FAVOR+),
``low_rank`` (Linformer), ``lsh_attention`` (Reformer's LSH buckets),
``attention_graphs`` (masks as graphs: windows, global and random edges).
"""

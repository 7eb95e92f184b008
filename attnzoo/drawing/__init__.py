"""Drawing attention: matrices and prefix maps (`matrices`), rollout (`rollout`), cross-attention (`cross_attention`).

Used by `attnzoo.viz`; plain functions over tensors, usable on any model's captured maps.
"""

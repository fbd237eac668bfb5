"""The BERT model, the shard reader and the trainer (PyTorch; no tensorflow, no Beam)."""

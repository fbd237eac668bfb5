"""bertprep: Beam pipelines for BERT pretraining data and a lean PyTorch trainer."""

"""The BERT model, the shard reader and the trainer (PyTorch; no tensorflow, no Beam).

architectures  the registry: an architecture's name -> its config, presets, model, HF names and what it trains
config       BERT's model config (the paper's presets) and what every config shares: its architecture, its JSON
bert         BERT for pretraining: the encoder, the masked-LM and sentence heads
attention    attention for any architecture: which kernel runs, each row's mask, the attention of q, k, v
losses       the masked LM's and sentence task's losses every architecture returns
optim        LAMB and AdamW without a Python loop over the parameters
schedules    the lr's schedules (linear, cosine, constant, wsd): the multiplier of --lr at a step, one entry a kind
data         the shard reader: shards (or pair records, masked as they load) -> batches, resumable exactly
plan         TrainPlan, a run's settings in five groups (one field a `bertprep train` flag, its default), RunError
train        the run: set-up, the loop, one optimizer step and its loss, evaluation
ranks        torchrun's ranks, the shared --output check, the stop they agree on, a failed collective
checkpoints  a checkpoint's contents, its writer thread, and the decisions of a resume
metrics      the statistics a step sums on the device, the records made of them, the run's log
hf           transformers' BERT: config.json both ways, one table of tensor names both ways (BERT's entry's)
init_from    a new run from trained weights (a bertprep run, a checkpoint, an HF directory), checked against the data
export_hf    a run's checkpoint as a Hugging Face model directory
plot         a run's loss and accuracy curves as a PNG

The flags are the command layer's (pipeline/commands/training.py): it builds the TrainPlan, and turns what a run
refuses into one line. Nothing here reads argparse.
"""

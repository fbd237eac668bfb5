"""Kept as a record, not to be run again (README.md): run once at commit 0f69e92, as
`python record_logits.py RUN HF expected_logits.npz` on each old run and its export-hf directory, it wrote the
logits of the old run's model (that commit's model.bert.Bert) on one fixed batch, after checking that transformers'
class of the export (BertForPreTraining or BertForMaskedLM) gives the same within 1e-5. Today's code need not have
model.bert.Bert or these names at all."""
import json
import os
import sys

import numpy as np
import torch
import transformers

from model import checkpoints
from model.bert import Bert
from model.config import BertConfig

run, hf_dir, out = sys.argv[1:4]
ckpt = checkpoints.load(checkpoints.latest_checkpoint(run))
config = BertConfig.from_json(ckpt["config"])
sentence_head = checkpoints.checkpoint_objective(ckpt) != "none"
ours = Bert(config, sentence_head)
ours.load_state_dict(ckpt["model"])
ours.eval()
L, V = 64, config.num_tokens
g = torch.Generator().manual_seed(0)
ids = torch.randint(5, V, (2, L), generator=g)
mask = torch.ones(2, L, dtype=torch.long)
mask[1, 40:] = 0
ids[1, 40:] = 0
ids[:, 0], ids[0, L - 1], ids[1, 39] = 2, 3, 3
segments = torch.zeros(2, L, dtype=torch.long)
if sentence_head:
    ids[0, 30], ids[1, 20] = 3, 3
    segments[0, 31:] = 1
    segments[1, 21:40] = 1
positions = torch.tensor([[1, 7, 19, 45], [3, 12, 25, 33]])
with torch.no_grad():
    a = ours(ids, segments, mask, positions)
architecture = json.load(open(os.path.join(hf_dir, "config.json")))["architectures"][0]
hf, info = getattr(transformers, architecture).from_pretrained(hf_dir, output_loading_info=True)
assert all(not v for v in info.values()), info
hf.eval()
with torch.no_grad():
    b = hf(input_ids=ids, attention_mask=mask, token_type_ids=segments)
logits = b.prediction_logits if sentence_head else b.logits
gathered = torch.gather(logits, 1, positions[:, :, None].expand(-1, -1, logits.shape[-1]))[..., :V]
print(architecture, tuple(a["mlm_logits"].shape), tuple(logits.shape))
torch.testing.assert_close(a["mlm_logits"], gathered, rtol=0, atol=1e-5)
expected = {"mlm_logits": a["mlm_logits"].numpy()}
if sentence_head:
    torch.testing.assert_close(a["nsp_logits"], b.seq_relationship_logits, rtol=0, atol=1e-5)
    expected["nsp_logits"] = a["nsp_logits"].numpy()
print("max |ours - hf|:", (a["mlm_logits"] - gathered).abs().max().item())
print("logit scale:", a["mlm_logits"].abs().max().item(), a["mlm_logits"].std().item())
np.savez(out, input_ids=ids.numpy(), attention_mask=mask.numpy(), token_type_ids=segments.numpy(),
         masked_lm_positions=positions.numpy(), **expected)

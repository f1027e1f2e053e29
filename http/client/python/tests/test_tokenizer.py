"""The tokenizer reader against Hugging Face's ids (kernels/tokenizer's
golden file) for the generated small preset's tokenizer.json, whose paths
the Go test that runs this suite gives in $WTS_TOKENIZER_JSON and
$WTS_TOKENIZER_GOLDEN."""

import json
import os
import unittest

from wts_client import load_tokenizer
from wts_client.tokenizer import Tokenizer


@unittest.skipUnless(os.environ.get("WTS_TOKENIZER_JSON") and os.environ.get("WTS_TOKENIZER_GOLDEN"), "no tokenizer.json and golden file given")
class TestTokenizer(unittest.TestCase):
    def setUp(self):
        with open(os.environ["WTS_TOKENIZER_JSON"], encoding="utf-8") as f:
            self.doc = json.load(f)
        with open(os.environ["WTS_TOKENIZER_GOLDEN"], encoding="utf-8") as f:
            self.golden = json.load(f)

    def test_golden(self):
        """Each variant of the golden file (GPT-2's pre-tokenization, Llama
        3's, Qwen's) gives Hugging Face's ids, with this reader and with
        whichever load picks."""
        self.assertEqual([v["name"] for v in self.golden], ["gpt2", "llama3", "qwen2"])
        for v in self.golden:
            doc = json.loads(json.dumps(self.doc))
            for k, val in v["settings"].items():
                if k == "ignore_merges":
                    doc["model"][k] = val
                else:
                    doc[k] = val
            for tok in (Tokenizer(doc), load_tokenizer(json.dumps(doc))):
                for c in v["cases"]:
                    ids = tok.encode(c["text"])
                    self.assertEqual(ids, c["ids"], (v["name"], c["text"]))
                    if "normalizer" not in v["settings"]:
                        self.assertEqual(tok.decode(ids), c["text"])

    def test_refusals(self):
        for change in ({"model": {"type": "WordPiece", "vocab": {}}}, {"pre_tokenizer": {"type": "Metaspace"}}, {"normalizer": {"type": "NFKC"}}):
            with self.assertRaises(ValueError):
                Tokenizer(dict(self.doc, **change))
        tok = Tokenizer(self.doc)
        self.assertEqual(tok.decode([1, 75, 2], skip_special_tokens=True), "H")
        with self.assertRaises(ValueError):
            tok.decode([10**9])


if __name__ == "__main__":
    unittest.main()

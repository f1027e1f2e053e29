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
        for tok in (Tokenizer(self.doc), load_tokenizer(json.dumps(self.doc))):  # this reader, and whichever load picks
            for g in self.golden:
                ids = tok.encode(g["text"])
                self.assertEqual(ids, g["ids"], g["text"])
                self.assertEqual(tok.decode(ids), g["text"])

    def test_refusals(self):
        for change in ({"model": {"type": "WordPiece", "vocab": {}}}, {"pre_tokenizer": {"type": "Metaspace"}}, {"normalizer": {"type": "NFC"}}):
            with self.assertRaises(ValueError):
                Tokenizer(dict(self.doc, **change))
        tok = Tokenizer(self.doc)
        self.assertEqual(tok.decode([1, 75, 2], skip_special_tokens=True), "H")
        with self.assertRaises(ValueError):
            tok.decode([10**9])


if __name__ == "__main__":
    unittest.main()

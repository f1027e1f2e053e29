"""Text to token ids and back, with a model's Hugging Face tokenizer.json
(``ServiceClient.get_tokenizer``).

With the ``tokenizers`` package installed, it does the work. Without it,
this module reads byte-level BPE tokenizers itself (GPT-2's scheme, the
one the service's generated models ship; testdata/golden.json in
kernels/tokenizer holds Hugging Face's ids that both readers are checked
against), and refuses other kinds with ValueError.
"""

import json
import unicodedata

__all__ = ["Tokenizer", "load"]


def load(document):
    """A tokenizer from a tokenizer.json document (a str, bytes or the
    decoded dict)."""
    if isinstance(document, (bytes, bytearray)):
        document = document.decode("utf-8")
    text = document if isinstance(document, str) else json.dumps(document)
    try:
        import tokenizers  # the reference implementation, where it is installed
    except ImportError:
        return Tokenizer(json.loads(text))
    return _HF(tokenizers.Tokenizer.from_str(text))


class _HF:
    """The ``tokenizers`` package behind the same two methods."""

    def __init__(self, tok):
        self._tok = tok

    def encode(self, text):
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids, skip_special_tokens=False):
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)


def _bytes_to_unicode():
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, n = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


_BYTE_CHAR = _bytes_to_unicode()
_CHAR_BYTE = {c: b for b, c in _BYTE_CHAR.items()}
_CONTRACTIONS = ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d")
# Unicode's White_Space, as the \s of Hugging Face's patterns means it.
_SPACE = set("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | {chr(c) for c in range(0x2000, 0x200B)}


def _class(ch):
    cat = unicodedata.category(ch)
    if cat.startswith("L"):
        return "letter"
    if cat.startswith("N"):
        return "number"
    if ch in _SPACE:
        return "space"
    return "other"


def _run(text, i, cls):
    j = i
    while j < len(text) and _class(text[j]) == cls:
        j += 1
    return j


def split(text):
    """Cuts text as GPT-2's pre-tokenization pattern does."""
    out, i = [], 0
    while i < len(text):
        j = _piece(text, i)
        out.append(text[i:j])
        i = j
    return out


def _piece(text, i):
    for c in _CONTRACTIONS:
        if text.startswith(c, i):
            return i + len(c)
    start = i
    if text[i] == " " and i + 1 < len(text) and _class(text[i + 1]) != "space":
        start = i + 1
    cls = _class(text[start])
    if cls != "space":
        return _run(text, start, cls)
    # Whitespace: all of it at the end, else all but its last character
    # (which goes with what follows), unless it is a single one.
    j = _run(text, i, "space")
    if j == len(text) or j - i == 1:
        return j
    return j - 1


class Tokenizer:
    """A byte-level BPE tokenizer read from tokenizer.json."""

    def __init__(self, doc):
        model, pre, dec = doc.get("model") or {}, doc.get("pre_tokenizer") or {}, doc.get("decoder") or {}
        if model.get("type") != "BPE":
            raise ValueError("unsupported tokenizer: model %r (only BPE)" % model.get("type"))
        if pre.get("type") != "ByteLevel" or not pre.get("use_regex", True) or pre.get("add_prefix_space"):
            raise ValueError("unsupported tokenizer: only a ByteLevel pre-tokenizer with GPT-2's pattern and no prefix space")
        if dec.get("type") != "ByteLevel":
            raise ValueError("unsupported tokenizer: only a ByteLevel decoder")
        if doc.get("normalizer") or model.get("byte_fallback") or model.get("ignore_merges"):
            raise ValueError("unsupported tokenizer: a normalizer, byte fallback or ignore_merges")
        self.vocab = dict(model["vocab"])
        self.tokens = {i: t for t, i in self.vocab.items()}
        self.ranks = {}
        for rank, m in enumerate(model.get("merges", [])):
            pair = tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m)
            if len(pair) != 2:
                raise ValueError("merge %d %r is not two tokens" % (rank, m))
            self.ranks.setdefault(pair, rank)
        self.special = {}
        for a in doc.get("added_tokens", []):
            self.tokens[a["id"]] = a["content"]
            self.special[a["content"]] = a["id"]
        self._by_first = {}
        for content in sorted(self.special, key=len, reverse=True):
            self._by_first.setdefault(content[0], []).append(content)
        self._special_ids = set(self.special.values())

    def encode(self, text):
        """Token ids of text: added tokens where their text is, the rest split
        by GPT-2's pattern and merged by BPE."""
        ids, i, start = [], 0, 0
        while i <= len(text):
            hit = None
            if i < len(text):
                for content in self._by_first.get(text[i], ()):
                    if text.startswith(content, i):
                        hit = content
                        break
            if hit is None and i < len(text):
                i += 1
                continue
            for piece in split(text[start:i]):
                for tok in self._bpe(piece):
                    if tok not in self.vocab:
                        raise ValueError("%r has no id" % tok)
                    ids.append(self.vocab[tok])
            if hit is None:
                break
            ids.append(self.special[hit])
            i += len(hit)
            start = i
        return ids

    def _bpe(self, piece):
        syms = [_BYTE_CHAR[b] for b in piece.encode("utf-8")]
        while len(syms) > 1:
            best = min(((self.ranks[p], k) for k, p in enumerate(zip(syms, syms[1:])) if p in self.ranks), default=None)
            if best is None:
                break
            a, b = syms[best[1]], syms[best[1] + 1]
            out, k = [], 0
            while k < len(syms):
                if k + 1 < len(syms) and syms[k] == a and syms[k + 1] == b:
                    out.append(a + b)
                    k += 2
                else:
                    out.append(syms[k])
                    k += 1
            syms = out
        return syms

    def decode(self, ids, skip_special_tokens=False):
        """The text of ids; bytes that do not form UTF-8 come out as U+FFFD."""
        out, pending = [], bytearray()
        for i in ids:
            tok = self.tokens.get(i)
            if tok is None:
                raise ValueError("id %d is not in the vocabulary" % i)
            if i in self._special_ids:
                if not skip_special_tokens:
                    out.append(pending.decode("utf-8", "replace"))
                    pending.clear()
                    out.append(tok)
                continue
            pending.extend(_CHAR_BYTE[c] for c in tok)
        out.append(pending.decode("utf-8", "replace"))
        return "".join(out)

"""Text to token ids and back, with a model's Hugging Face tokenizer.json
(``ServiceClient.get_tokenizer``).

With the ``tokenizers`` package installed, it does the work. Without it,
this module reads byte-level BPE tokenizers itself: GPT-2's scheme (the
one the service's generated models ship) and Llama 3's and Qwen's (a
Split by their pattern, Qwen's after NFC); kernels/tokenizer's
testdata/golden.json holds Hugging Face's ids that both readers are
checked against. Other kinds raise ValueError.
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


def split(text, piece=None):
    """Cuts text as a pre-tokenization pattern does (GPT-2's by default;
    piece gives the end of the piece at a place)."""
    piece = piece or _piece
    out, i = [], 0
    while i < len(text):
        j = piece(text, i)
        out.append(text[i:j])
        i = j
    return out


def _spaces(text, i, j):
    """The end of the piece of the whitespace text[i:j] by \\s+(?!\\S)|\\s+."""
    if j == len(text) or j - i == 1:
        return j
    return j - 1


def _split_piece(text, i, digits):
    """The end of the piece at i by Llama 3's pattern (digits 3) or Qwen's
    (digits 1): (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|
    \\p{N}{1,digits}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"""
    for c in _CONTRACTIONS:
        if text[i:i + len(c)].lower() == c:
            return i + len(c)
    ch = text[i]
    cls = _class(ch)
    if cls == "letter":
        return _run(text, i, "letter")
    if cls != "number" and ch not in "\r\n" and i + 1 < len(text) and _class(text[i + 1]) == "letter":
        return _run(text, i + 1, "letter")
    if cls == "number":
        j = i
        while j < len(text) and j - i < digits and _class(text[j]) == "number":
            j += 1
        return j
    start = i
    if ch == " " and i + 1 < len(text) and _class(text[i + 1]) == "other":
        start = i + 1
    if start > i or cls == "other":
        j = _run(text, start, "other")
        while j < len(text) and text[j] in "\r\n":
            j += 1
        return j
    j = _run(text, i, "space")
    breaks = [k for k in range(i, j) if text[k] in "\r\n"]
    if breaks:
        return breaks[-1] + 1
    return _spaces(text, i, j)


# The Split patterns this reader knows, as tokenizer.json spells them.
_PATTERNS = {
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+":
        lambda text, i: _split_piece(text, i, 3),  # Llama 3
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+":
        lambda text, i: _split_piece(text, i, 1),  # Qwen 2 and 3
}


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
    return _spaces(text, i, _run(text, i, "space"))


class Tokenizer:
    """A byte-level BPE tokenizer read from tokenizer.json."""

    def __init__(self, doc):
        model, pre, dec = doc.get("model") or {}, doc.get("pre_tokenizer") or {}, doc.get("decoder") or {}
        if model.get("type") != "BPE":
            raise ValueError("unsupported tokenizer: model %r (only BPE)" % model.get("type"))
        self._piece = self._pre_tokenizer(pre)
        if dec.get("type") != "ByteLevel":
            raise ValueError("unsupported tokenizer: only a ByteLevel decoder")
        norm = doc.get("normalizer")
        if norm and norm.get("type") != "NFC":
            raise ValueError("unsupported tokenizer: normalizer %r (only none or NFC)" % norm.get("type"))
        self._nfc = bool(norm)
        if model.get("byte_fallback"):
            raise ValueError("unsupported tokenizer: byte fallback")
        self._ignore_merges = bool(model.get("ignore_merges"))
        self.vocab = dict(model["vocab"])
        self.tokens = {i: t for t, i in self.vocab.items()}
        self.ranks = {}
        for rank, m in enumerate(model.get("merges", [])):
            pair = tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m)  # "a b", or ["a", "b"] in newer files
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

    @staticmethod
    def _pre_tokenizer(pre):
        """The piece function of a ByteLevel pre-tokenizer (GPT-2's pattern),
        or of a Split by a known pattern followed by ByteLevel without one."""
        if pre.get("type") == "ByteLevel" and pre.get("use_regex", True) and not pre.get("add_prefix_space"):
            return _piece
        steps = pre.get("pretokenizers") or []
        if pre.get("type") == "Sequence" and len(steps) == 2:
            sp, bl = steps
            if (sp.get("type") == "Split" and sp.get("behavior") == "Isolated" and not sp.get("invert") and bl.get("type") == "ByteLevel"
                    and not bl.get("use_regex", True) and not bl.get("add_prefix_space")):
                piece = _PATTERNS.get((sp.get("pattern") or {}).get("Regex"))
                if piece:
                    return piece
                raise ValueError("unsupported tokenizer: split pattern %r" % (sp.get("pattern"),))
        raise ValueError("unsupported tokenizer: only ByteLevel pre-tokenizers (alone, or after a Split by a known pattern) without a prefix space")

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
            chunk = unicodedata.normalize("NFC", text[start:i]) if self._nfc else text[start:i]
            for piece in split(chunk, self._piece):
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
        if self._ignore_merges and "".join(syms) in self.vocab:
            return ["".join(syms)]
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

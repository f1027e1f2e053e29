"""RFC 8785 (JSON Canonicalization Scheme) serialization.

Object members sorted by the UTF-16 code units of their names, no
whitespace, strings with the minimal escapes, and numbers as ECMAScript's
Number.prototype.toString prints them. wts computes an operation's
request_hash as the SHA-256 of this form, so the client must produce the
same bytes for every value, floats included (``json.dumps(sort_keys=True)``
does not: it writes 1e-05 where ECMAScript writes 0.00001).
"""

import json
import math

__all__ = ["canonicalize", "number"]

_MAX_SAFE = 2**53


def canonicalize(value) -> bytes:
    """The canonical UTF-8 bytes of a JSON value (dict, list, str, int,
    float, bool, None; tuples as lists)."""
    out = []
    _write(value, out)
    return "".join(out).encode("utf-8")


def _write(v, out):
    if v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, str):
        out.append(json.dumps(v, ensure_ascii=False))
    elif isinstance(v, int):
        out.append(str(v) if -_MAX_SAFE <= v <= _MAX_SAFE else number(float(v)))
    elif isinstance(v, float):
        out.append(number(v))
    elif isinstance(v, dict):
        for k in v:
            if not isinstance(k, str):
                raise TypeError("JSON object keys must be strings, not %r" % (k,))
        out.append("{")
        for i, k in enumerate(sorted(v, key=_utf16)):
            if i:
                out.append(",")
            out.append(json.dumps(k, ensure_ascii=False))
            out.append(":")
            _write(v[k], out)
        out.append("}")
    elif isinstance(v, (list, tuple)):
        out.append("[")
        for i, x in enumerate(v):
            if i:
                out.append(",")
            _write(x, out)
        out.append("]")
    else:
        raise TypeError("not a JSON value: %r" % (type(v).__name__,))


def _utf16(key):
    return key.encode("utf-16-be", "surrogatepass")


def number(f: float) -> str:
    """f as ECMAScript prints it: the shortest digits that round-trip, in
    plain notation from 1e-6 up to 1e21, else with an exponent."""
    if math.isnan(f) or math.isinf(f):
        raise ValueError("JSON has no NaN or Infinity")
    if f == 0:
        return "0"
    sign = "-" if f < 0 else ""
    r = repr(abs(f))  # the shortest round-trip digits, as ECMAScript picks them
    mant, _, exp = r.partition("e")
    whole, _, frac = mant.partition(".")
    digits = whole + frac
    n = len(whole) + (int(exp) if exp else 0)  # f = 0.digits × 10^n
    stripped = digits.lstrip("0")
    n -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        s = digits + "0" * (n - k)
    elif 0 < n <= 21:
        s = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        s = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        s = (digits if k == 1 else digits[0] + "." + digits[1:]) + "e" + ("+" if e >= 0 else "-") + str(abs(e))
    return sign + s

import math
import struct
import unittest

from wts_client.jcs import canonicalize, number

# RFC 8785, Appendix B: IEEE 754 bit patterns and their ECMAScript form.
VECTORS = {
    0x0000000000000000: "0", 0x8000000000000000: "0", 0x0000000000000001: "5e-324", 0x8000000000000001: "-5e-324",
    0x7fefffffffffffff: "1.7976931348623157e+308", 0xffefffffffffffff: "-1.7976931348623157e+308",
    0x4340000000000000: "9007199254740992", 0xc340000000000000: "-9007199254740992", 0x4430000000000000: "295147905179352830000",
    0x44b52d02c7e14af5: "9.999999999999997e+22", 0x44b52d02c7e14af6: "1e+23", 0x44b52d02c7e14af7: "1.0000000000000001e+23",
    0x444b1ae4d6e2ef4e: "999999999999999700000", 0x444b1ae4d6e2ef4f: "999999999999999900000", 0x444b1ae4d6e2ef50: "1e+21",
    0x3eb0c6f7a0b5ed8c: "9.999999999999997e-7", 0x3eb0c6f7a0b5ed8d: "0.000001", 0x41b3de4355555553: "333333333.3333332",
    0x41b3de4355555554: "333333333.33333325", 0x41b3de4355555555: "333333333.3333333", 0x41b3de4355555556: "333333333.3333334",
    0x41b3de4355555557: "333333333.33333343", 0xbecbf647612f3696: "-0.0000033333333333333333", 0x43143ff3c1cb0959: "1424953923781206.2",
}


class TestJCS(unittest.TestCase):
    def test_numbers(self):
        for bits, want in VECTORS.items():
            f = struct.unpack(">d", bits.to_bytes(8, "big"))[0]
            self.assertEqual(number(f), want, hex(bits))
        for f, want in [(1e-5, "0.00001"), (1e-7, "1e-7"), (2.5, "2.5"), (100.0, "100"), (1e21, "1e+21"), (123456789.0, "123456789")]:
            self.assertEqual(number(f), want)
        for bad in (math.nan, math.inf, -math.inf):
            self.assertRaises(ValueError, number, bad)

    def test_values(self):
        # Members sorted by UTF-16 code units (U+20AC < U+1F600's surrogates < U+FB33),
        # strings with the minimal escapes, integers past 2^53 as doubles.
        v = {"\ufb33": 3, "\U0001F600": 2, "\u20ac": 1, "b": [1, 1e-5, True, None, False, 2**60], "a": "é\n\x01\u2028\"\\"}
        want = '{"a":"é\\n\\u0001\u2028\\"\\\\","b":[1,0.00001,true,null,false,1152921504606847000],"\u20ac":1,"\U0001F600":2,"\ufb33":3}'
        self.assertEqual(canonicalize(v), want.encode("utf-8"))
        self.assertEqual(canonicalize({"seq_id": 1, "payload": {"adam_params": {"learning_rate": 1e-5}}}),
                         b'{"payload":{"adam_params":{"learning_rate":0.00001}},"seq_id":1}')
        self.assertRaises(TypeError, canonicalize, {1: 2})
        self.assertRaises(TypeError, canonicalize, object())


if __name__ == "__main__":
    unittest.main()

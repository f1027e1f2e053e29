package persistence

import (
	"encoding/binary"
	"math"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// EncodeMsgpack writes op exactly as msgpack's reflection would (a map of
// its tagged fields in declaration order, usage left out when empty), but
// appended straight into a buffer: an operation record is written three
// times in its life (accepted, executing, ended), inside the store's serial
// commit loop, where msgpack's reflective encoder showed in bench/apibench's
// CPU profiles (BenchmarkOperationEncoding compares the two). TestOperationEncoding
// holds the two to the same bytes with every field set, so a field added to
// Operation and not here fails it.
func (op *Operation) EncodeMsgpack(e *msgpack.Encoder) error {
	_, err := e.Writer().Write(op.marshal())
	return err
}

// marshal is op's record, in a buffer sized for it at once: names, ids and
// times take ~410 bytes beside the raw fields and the client's key, a usage
// component ~130. (Sized for the raw fields alone, an ended operation's
// record outgrew its buffer and was copied, which was much of the store's
// allocation under load.)
func (op *Operation) marshal() []byte {
	n := 512 + len(op.Result) + len(op.Progress) + len(op.Payload) + len(op.IdempotencyKey) + 192*len(op.Usage)
	if op.ErrorMessage != nil {
		n += len(*op.ErrorMessage)
	}
	return op.appendMsgpack(make([]byte, 0, n))
}

func (op *Operation) appendMsgpack(b []byte) []byte {
	n := 16
	if len(op.Usage) > 0 {
		n++
	}
	if op.Attempts != 0 {
		n++
	}
	if op.HoldMicroUSD != 0 {
		n++
	}
	if op.Charged {
		n++
	}
	b = append(b, msgpcode.Map16, 0, byte(n)) // past a fixmap's 15
	b = appendStr(appendStr(b, "id"), op.ID)
	b = appendStr(appendStr(b, "session_id"), op.SessionID)
	b = appendStr(appendStr(b, "run_id"), op.RunID)
	b = appendInt64(appendStr(b, "seq_id"), op.SeqID)
	b = appendStr(appendStr(b, "kind"), op.Kind)
	b = appendStr(appendStr(b, "status"), op.Status)
	b = appendBin(appendStr(b, "result"), op.Result)
	b = appendStrPtr(appendStr(b, "error_code"), op.ErrorCode)
	b = appendStrPtr(appendStr(b, "error_message"), op.ErrorMessage)
	b = appendBin(appendStr(b, "progress"), op.Progress)
	b = appendTimePtr(appendStr(b, "progress_updated_at"), op.ProgressUpdatedAt)
	b = appendTime(appendStr(b, "created_at"), op.CreatedAt)
	b = appendTime(appendStr(b, "updated_at"), op.UpdatedAt)
	b = appendStr(appendStr(b, "idempotency_key"), op.IdempotencyKey)
	b = appendStr(appendStr(b, "request_hash"), op.RequestHash)
	b = appendBin(appendStr(b, "payload"), op.Payload)
	if len(op.Usage) > 0 {
		b = appendUsage(appendStr(b, "usage"), op.Usage)
	}
	if op.Attempts != 0 {
		b = appendInt64(appendStr(b, "attempts"), op.Attempts)
	}
	if op.HoldMicroUSD != 0 {
		b = appendInt64(appendStr(b, "hold"), op.HoldMicroUSD)
	}
	if op.Charged {
		b = append(appendStr(b, "charged"), msgpcode.True)
	}
	return b
}

// appendUsage writes an ended operation's usage components; by reflection
// they were half the cost of its record.
func appendUsage(b []byte, us []Usage) []byte {
	switch l := len(us); {
	case l < 16:
		b = append(b, msgpcode.FixedArrayLow|byte(l))
	case l <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, msgpcode.Array16), uint16(l))
	default:
		b = binary.BigEndian.AppendUint32(append(b, msgpcode.Array32), uint32(l))
	}
	for i := range us {
		u := &us[i]
		ids := [...]struct{ name, v string }{{"session_id", u.SessionID}, {"run_id", u.RunID}, {"operation_id", u.OperationID}, {"provider", u.Provider}}
		n := 8 // the fields without omitempty
		for _, f := range ids {
			if f.v != "" {
				n++
			}
		}
		b = append(b, msgpcode.FixedMapLow|byte(n))
		for _, f := range ids {
			if f.v != "" {
				b = appendStr(appendStr(b, f.name), f.v)
			}
		}
		b = appendStr(appendStr(b, "meter"), u.Meter)
		b = appendInt64(appendStr(b, "quantity"), u.Quantity)
		b = appendStr(appendStr(b, "unit"), u.Unit)
		b = appendInt64(appendStr(b, "unit_price"), u.UnitPrice)
		b = appendInt64(appendStr(b, "cost_microusd"), u.CostMicroUSD)
		b = appendStr(appendStr(b, "settlement_status"), u.SettlementStatus)
		b = appendTime(appendStr(b, "observed_at"), u.ObservedAt)
		b = appendTimePtr(appendStr(b, "settled_at"), u.SettledAt)
	}
	return b
}

// The appenders below write msgpack's own choices of format (what its
// Encoder's EncodeString, EncodeBytes, EncodeInt64 and EncodeTime write).

func appendStr(b []byte, s string) []byte {
	if len(s) < 32 {
		b = append(b, msgpcode.FixedStrLow|byte(len(s)))
	} else {
		b = appendHead(b, len(s), msgpcode.Str8, msgpcode.Str16, msgpcode.Str32)
	}
	return append(b, s...)
}

func appendStrPtr(b []byte, s *string) []byte {
	if s == nil {
		return append(b, msgpcode.Nil)
	}
	return appendStr(b, *s)
}

func appendTimePtr(b []byte, t *time.Time) []byte {
	if t == nil {
		return append(b, msgpcode.Nil)
	}
	return appendTime(b, *t)
}

// appendBin writes a []byte (json.RawMessage) field: nil stays nil.
func appendBin(b, v []byte) []byte {
	if v == nil {
		return append(b, msgpcode.Nil)
	}
	return append(appendHead(b, len(v), msgpcode.Bin8, msgpcode.Bin16, msgpcode.Bin32), v...)
}

// appendHead writes a str or bin header for length l in the first of its
// 8-, 16- and 32-bit forms (codes c8, c16, c32) that holds it.
func appendHead(b []byte, l int, c8, c16, c32 byte) []byte {
	switch {
	case l < 256:
		return append(b, c8, byte(l))
	case l <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, c16), uint16(l))
	default:
		return binary.BigEndian.AppendUint32(append(b, c32), uint32(l))
	}
}

func appendInt64(b []byte, n int64) []byte {
	return binary.BigEndian.AppendUint64(append(b, msgpcode.Int64), uint64(n))
}

// appendTime writes the msgpack timestamp extension (type −1) in its 4-, 8-
// or 12-byte form.
func appendTime(b []byte, t time.Time) []byte {
	const timeExt = 0xff // int8(−1)
	secs := uint64(t.Unix())
	if secs>>34 == 0 {
		data := uint64(t.Nanosecond())<<34 | secs
		if data&0xffffffff00000000 == 0 {
			return binary.BigEndian.AppendUint32(append(b, msgpcode.FixExt4, timeExt), uint32(data))
		}
		return binary.BigEndian.AppendUint64(append(b, msgpcode.FixExt8, timeExt), data)
	}
	b = append(b, msgpcode.Ext8, 12, timeExt)
	b = binary.BigEndian.AppendUint32(b, uint32(t.Nanosecond()))
	return binary.BigEndian.AppendUint64(b, secs)
}

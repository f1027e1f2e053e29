package persistence

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
)

// The write-ahead log makes a group commit one sequential write and one
// fdatasync: committed through bbolt, a group of writes rewrote several
// times as many B+tree pages at scattered offsets and synced twice, which
// made every commit milliseconds long.
// Records are the final values a group left (see layer), so replaying one
// twice changes nothing. The log is two files used by turns, one
// generation each: a checkpoint moves a finished generation into bbolt
// while the next is being written (Store.checkpoint).
//
// Layout: a 16-byte header (walMagic, then the generation, little-endian),
// then records: payload length (uint32), CRC-32C of the generation and the
// payload (uint32), payload. The generation in the checksum makes an older
// generation's record left past the tail invalid, so replay stops at the
// first record that is torn, zero or stale.
const (
	walMagic     = "wtswal01"
	walHeader    = 16
	walRecordHdr = 8
	walInitial   = 4 << 20 // zero-filled up front (see grow)
	maxRecord    = 1 << 30
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// errCorruptLog is a log whose header is not ours: refusing to start beats
// replaying garbage into the store.
var errCorruptLog = errors.New("write-ahead log header is not a wts log")

type wal struct {
	f    *os.File
	gen  uint64
	off  int64 // where the next record goes
	size int64 // bytes known to be allocated and zero-filled or written
	buf  []byte
}

// openWAL opens one log file, creating it (as generation 0, which holds
// nothing) when missing, and returns its generation's valid records.
func openWAL(path string) (*wal, [][]byte, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("open log: %w", err)
	}
	w := &wal{f: f}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("stat log: %w", err)
	}
	w.size = st.Size()
	if w.size == 0 { // new: allocate, then make the file's name durable
		if err := w.reset(0); err != nil {
			f.Close()
			return nil, nil, err
		}
		if err := syncFolder(filepath.Dir(path)); err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("sync log folder: %w", err)
		}
		return w, nil, nil
	}
	data, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("read log: %w", err)
	}
	if len(data) < walHeader || string(data[:8]) != walMagic {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", path, errCorruptLog)
	}
	w.gen, w.off = binary.LittleEndian.Uint64(data[8:16]), walHeader
	recs, _ := readRecords(data[walHeader:], w.gen)
	return w, recs, nil
}

// readRecords returns the valid records at the start of data, written under
// generation gen, and the bytes they take.
func readRecords(data []byte, gen uint64) ([][]byte, int) {
	var recs [][]byte
	off := 0
	for len(data)-off >= walRecordHdr {
		n := int(binary.LittleEndian.Uint32(data[off:]))
		sum := binary.LittleEndian.Uint32(data[off+4:])
		if n == 0 || n > len(data)-off-walRecordHdr {
			break
		}
		payload := data[off+walRecordHdr : off+walRecordHdr+n]
		if recordSum(gen, payload) != sum {
			break
		}
		recs = append(recs, payload)
		off += walRecordHdr + n
	}
	return recs, off
}

func recordSum(gen uint64, payload []byte) uint32 {
	var g [8]byte
	binary.LittleEndian.PutUint64(g[:], gen)
	return crc32.Update(crc32.Update(0, crcTable, g[:]), crcTable, payload)
}

// append writes l as one record and returns once it is on disk, with the
// bytes it took. The record is encoded in place after its header's room.
func (w *wal) append(l *layer) (int, error) {
	var hdr [walRecordHdr]byte // filled in once the payload is known
	w.buf = l.encode(append(w.buf[:0], hdr[:]...))
	payload := w.buf[walRecordHdr:]
	if len(payload) == 0 || len(payload) > maxRecord {
		return 0, fmt.Errorf("log record of %d bytes", len(payload))
	}
	binary.LittleEndian.PutUint32(w.buf, uint32(len(payload)))
	binary.LittleEndian.PutUint32(w.buf[4:], recordSum(w.gen, payload))
	n := len(w.buf)
	if err := w.grow(w.off + int64(n)); err != nil {
		return 0, err
	}
	if _, err := w.f.WriteAt(w.buf, w.off); err != nil {
		return 0, fmt.Errorf("write log: %w", err)
	}
	if err := fdatasync(w.f); err != nil {
		return 0, fmt.Errorf("sync log: %w", err)
	}
	w.off += int64(n)
	return n, nil
}

// grow makes sure the file's first need bytes are allocated. It writes
// zeros rather than extending the file with each record: a write that
// changes the size makes fdatasync commit the file system's journal too,
// which here cost more than the data.
func (w *wal) grow(need int64) error {
	if need <= w.size {
		return nil
	}
	to := max(need, 2*w.size, walInitial)
	zeros := make([]byte, 1<<20)
	for at := w.size; at < to; at += int64(len(zeros)) {
		chunk := zeros[:min(int64(len(zeros)), to-at)]
		if _, err := w.f.WriteAt(chunk, at); err != nil {
			return fmt.Errorf("grow log: %w", err)
		}
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("sync log: %w", err)
	}
	w.size = to
	return nil
}

// reset starts the file over under generation gen; the records it held
// must be in the store file.
func (w *wal) reset(gen uint64) error {
	if err := w.grow(walInitial); err != nil {
		return err
	}
	var h [walHeader]byte
	copy(h[:], walMagic)
	binary.LittleEndian.PutUint64(h[8:], gen)
	if _, err := w.f.WriteAt(h[:], 0); err != nil {
		return fmt.Errorf("write log header: %w", err)
	}
	if err := fdatasync(w.f); err != nil {
		return fmt.Errorf("sync log: %w", err)
	}
	w.gen, w.off = gen, walHeader
	return nil
}

func (w *wal) close() error { return w.f.Close() }

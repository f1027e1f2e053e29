// Package safetensors reads and writes the safetensors format used by HF model
// folders and PEFT adapters: an 8-byte little-endian header length, a JSON
// header naming each tensor's dtype, shape and byte range, then the raw data.
package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"unsafe"

	"github.com/wts-project/wts/kernels/kerr"
)

// maxHeader bounds the JSON header so that a corrupt length cannot make us
// allocate gigabytes before failing.
const maxHeader = 100 << 20

// Info describes one tensor in a file.
type Info struct {
	DType       DType    `json:"dtype"`
	Shape       []int    `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// Elements is the product of the shape.
func (i Info) Elements() int {
	n := 1
	for _, d := range i.Shape {
		n *= d
	}
	return n
}

// File is an open safetensors file. Tensors are read on demand so that a
// sharded multi-gigabyte model never needs two copies in memory.
type File struct {
	f        *os.File
	dataBase int64
	Tensors  map[string]Info
	Metadata map[string]string
}

// Open reads and validates the header of path.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	sf, err := parseHeader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	return sf, nil
}

func parseHeader(f *os.File) (*File, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var lenBuf [8]byte
	if _, err := io.ReadFull(f, lenBuf[:]); err != nil {
		return nil, fmt.Errorf("reading header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > maxHeader || int64(n)+8 > st.Size() {
		return nil, fmt.Errorf("header length %d is out of range for a %d-byte file", n, st.Size())
	}
	hdr := make([]byte, n)
	if _, err := io.ReadFull(f, hdr); err != nil {
		return nil, fmt.Errorf("reading header: %w", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hdr, &raw); err != nil {
		return nil, fmt.Errorf("header is not a JSON object: %w", err)
	}
	sf := &File{f: f, dataBase: 8 + int64(n), Tensors: map[string]Info{}}
	dataLen := st.Size() - sf.dataBase
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &sf.Metadata); err != nil {
				return nil, fmt.Errorf("__metadata__: %w", err)
			}
			continue
		}
		var info Info
		if err := json.Unmarshal(msg, &info); err != nil {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		if info.DType.Size() == 0 {
			return nil, fmt.Errorf("tensor %q: unsupported dtype %q", name, info.DType)
		}
		elems := int64(1)
		for _, d := range info.Shape {
			// Bound the running product by the data size so that a hostile
			// shape cannot overflow into a plausible element count.
			if d < 0 || (d > 0 && elems > dataLen/int64(d)+1) {
				return nil, fmt.Errorf("tensor %q: shape %v does not fit the file", name, info.Shape)
			}
			elems *= int64(d)
		}
		begin, end := info.DataOffsets[0], info.DataOffsets[1]
		if begin < 0 || end < begin || end > dataLen || end-begin != elems*int64(info.DType.Size()) {
			return nil, fmt.Errorf("tensor %q: byte range %d..%d does not fit dtype %s shape %v in %d data bytes",
				name, begin, end, info.DType, info.Shape, dataLen)
		}
		sf.Tensors[name] = info
	}
	return sf, nil
}

// Close releases the file.
func (s *File) Close() error { return s.f.Close() }

// ErrNotFound is returned for a tensor name the file does not hold.
var ErrNotFound = errors.New("tensor not found")

// Float32 reads a tensor and widens it to float32.
func (s *File) Float32(name string) ([]float32, []int, error) {
	info, ok := s.Tensors[name]
	if !ok {
		return nil, nil, fmt.Errorf("%q: %w", name, ErrNotFound)
	}
	out := make([]float32, info.Elements())
	if info.DType == F32 && littleEndian {
		return out, info.Shape, s.readRaw(name, info, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(out))), 4*len(out)))
	}
	err := s.read(name, info, func(at int, raw []byte) { decodeInto(info.DType, raw, out[at:]) })
	return out, info.Shape, err
}

// Narrow reads a tensor as d, BF16 or F16: a tensor of that type as it is
// stored, any other rounded to nearest even, without a float32 copy of
// the whole.
func (s *File) Narrow(name string, d DType) ([]uint16, []int, error) {
	info, ok := s.Tensors[name]
	if !ok {
		return nil, nil, fmt.Errorf("%q: %w", name, ErrNotFound)
	}
	round := rounders[d]
	if round == nil {
		return nil, nil, fmt.Errorf("%q: %s is not a 16-bit type", name, d)
	}
	out := make([]uint16, info.Elements())
	if info.DType == d && littleEndian {
		return out, info.Shape, s.readRaw(name, info, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(out))), 2*len(out)))
	}
	var wide []float32
	err := s.read(name, info, func(at int, raw []byte) {
		dst := out[at : at+len(raw)/info.DType.Size()]
		if info.DType == d {
			for i := range dst {
				dst[i] = binary.LittleEndian.Uint16(raw[2*i:])
			}
			return
		}
		wide = slices.Grow(wide[:0], len(dst))[:len(dst)]
		decodeInto(info.DType, raw, wide)
		for i, v := range wide {
			dst[i] = round(v)
		}
	})
	return out, info.Shape, err
}

// littleEndian is whether this machine stores values as the format does,
// so that a tensor of the type wanted reads straight into its destination.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// readRaw reads tensor name's bytes into dst, which is their size.
func (s *File) readRaw(name string, info Info, dst []byte) error {
	if _, err := s.f.ReadAt(dst, s.dataBase+info.DataOffsets[0]); err != nil {
		return fmt.Errorf("reading %q: %w", name, err)
	}
	return nil
}

// readChunk bounds the bytes read at once, so that reading a tensor costs
// its destination and no second copy of it.
const readChunk = 1 << 20

// read hands tensor name's raw bytes to fn a whole number of elements at a
// time, with the index of the first.
func (s *File) read(name string, info Info, fn func(at int, raw []byte)) error {
	size := info.DType.Size()
	buf := make([]byte, min(readChunk, info.DataOffsets[1]-info.DataOffsets[0]))
	for off := info.DataOffsets[0]; off < info.DataOffsets[1]; {
		n := min(int64(len(buf)), info.DataOffsets[1]-off)
		if _, err := s.f.ReadAt(buf[:n], s.dataBase+off); err != nil {
			return fmt.Errorf("reading %q: %w", name, err)
		}
		fn(int(off-info.DataOffsets[0])/size, buf[:n])
		off += n
	}
	return nil
}

// Decode widens raw little-endian elements of type d to float32.
func Decode(d DType, buf []byte) []float32 {
	out := make([]float32, len(buf)/d.Size())
	decodeInto(d, buf, out)
	return out
}

// decodeInto widens buf's elements into out[:len(buf)/d.Size()].
func decodeInto(d DType, buf []byte, out []float32) {
	out = out[:len(buf)/d.Size()]
	switch d {
	case F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
		}
	case BF16:
		for i := range out {
			out[i] = BF16ToF32(binary.LittleEndian.Uint16(buf[2*i:]))
		}
	case F16:
		for i := range out {
			out[i] = F16ToF32(binary.LittleEndian.Uint16(buf[2*i:]))
		}
	}
}

// Tensor is one tensor to write.
type Tensor struct {
	Name  string
	DType DType
	Shape []int // product must equal len(Data)
	Data  []float32
}

// Write stores tensors at path, narrowing each to its DType. Names are sorted
// and the header padded to 8 bytes, as the reference writer does, so equal
// inputs give byte-identical files (checksums of artifacts depend on it).
func Write(path string, tensors []Tensor, metadata map[string]string) error {
	sorted := append([]Tensor(nil), tensors...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	hdr := map[string]any{}
	if len(metadata) > 0 {
		hdr["__metadata__"] = metadata
	}
	var off int64
	for _, t := range sorted {
		n := 1
		for _, d := range t.Shape {
			n *= d
		}
		if n != len(t.Data) || t.DType.Size() == 0 {
			return fmt.Errorf("safetensors: tensor %q: shape %v / dtype %q do not fit %d values", t.Name, t.Shape, t.DType, len(t.Data))
		}
		// Nothing the service writes (weights, checkpoints, exports) may
		// carry a NaN or an infinity: whoever loads it would compute garbage.
		for i, v := range t.Data {
			if v != v || math.IsInf(float64(v), 0) {
				return fmt.Errorf("%w: tensor %q holds %v at %d", kerr.ErrNonFinite, t.Name, v, i)
			}
		}
		size := int64(n * t.DType.Size())
		hdr[t.Name] = Info{DType: t.DType, Shape: t.Shape, DataOffsets: [2]int64{off, off + size}}
		off += size
	}
	js, err := json.Marshal(hdr)
	if err != nil {
		return err
	}
	for len(js)%8 != 0 {
		js = append(js, ' ')
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	w := &errWriter{w: f}
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(js)))
	w.write(lenBuf[:])
	w.write(js)
	for _, t := range sorted {
		w.write(Encode(t.DType, t.Data))
	}
	if w.err == nil {
		w.err = f.Sync()
	}
	if cerr := f.Close(); w.err == nil {
		w.err = cerr
	}
	if w.err != nil {
		os.Remove(tmp)
		return fmt.Errorf("safetensors: writing %s: %w", path, w.err)
	}
	return os.Rename(tmp, path)
}

// Encode narrows float32 values to raw little-endian elements of type d.
func Encode(d DType, data []float32) []byte {
	buf := make([]byte, len(data)*d.Size())
	switch d {
	case F32:
		for i, v := range data {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
		}
	case BF16:
		for i, v := range data {
			binary.LittleEndian.PutUint16(buf[2*i:], F32ToBF16(v))
		}
	case F16:
		for i, v := range data {
			binary.LittleEndian.PutUint16(buf[2*i:], F32ToF16(v))
		}
	}
	return buf
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) write(p []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(p)
	}
}
